-- The events triggers in fewer statements (issue 18): each statement a
-- PL/pgSQL trigger runs is a trip through the executor, and every
-- transaction that inserts events ran four of them (the claim's lock and
-- flag, the notification's count and its pg_notify): about eight of the
-- 39 statements an operation cost. Same behaviour, two statements.

-- 0007's claim: the lock and the flag in one statement, the sequence's last
-- value read before the lock is taken.
CREATE OR REPLACE FUNCTION sandbox_events_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- one lock per transaction is enough: its first key is below all its ids
    IF current_setting('sandbox.events_claimed', true) IS DISTINCT FROM '1' THEN
        PERFORM pg_advisory_xact_lock_shared(1396834304 + (s.v >> 31)::int, (s.v & 2147483647)::int),
                set_config('sandbox.events_claimed', '1', true)
           FROM (SELECT coalesce(pg_sequence_last_value('events_id_seq'::regclass), 0) AS v) s;
    END IF;
    RETURN NULL;
END;
$$;

-- 0016's notification: the summary of the inserted rows and the
-- pg_notify in one statement, nothing sent when no row was inserted.
CREATE OR REPLACE FUNCTION sandbox_events_notify_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sandbox_wake',
                      CASE WHEN length(x.ended) > 7000 THEN ''
                           ELSE 'ev' || CASE WHEN x.leased THEN ';lease' ELSE '' END
                                     || CASE WHEN x.room THEN ';room' ELSE '' END
                                     || coalesce(';ops=' || x.ended, '') END)
       FROM (SELECT count(*) AS n, bool_or(kind = 'operation.leased') AS leased,
                    bool_or(kind IN ('sandbox.failed', 'sandbox.lost', 'sandbox.deleted', 'worker.registered',
                                     'worker.resumed', 'worker.ready')
                            OR (kind = 'operation.admitted' AND data->>'from' IN ('leased', 'running'))) AS room,
                    string_agg(DISTINCT operation_id, ',') FILTER (WHERE kind IN
                      ('operation.succeeded', 'operation.failed', 'operation.cancelled')) AS ended
               FROM inserted) x
      WHERE x.n > 0;
    RETURN NULL;
END;
$$;
