-- Sandbox schema, version 7: a gap-free cursor for the events API. Event ids
-- come from a sequence, so a transaction can hold a smaller id than one that
-- commits before it; a reader that moved its cursor past the later id would
-- never see the earlier one. Every statement that inserts events first takes
-- a shared advisory lock (held to the end of its transaction) keyed by the
-- sequence's last value, which is below every id the transaction will get.
-- sandbox_events_horizon() returns an id at or below which nothing can still
-- commit: readers return events up to it and no further.

-- The lock keys: (1396834304 + v >> 31, v & 0x7fffffff), the two-int4 form,
-- apart from the bigint-keyed advisory locks (migrations, the publisher).
CREATE FUNCTION sandbox_events_claim() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
BEGIN
    -- one lock per transaction is enough: its first key is below all its ids
    IF current_setting('sandbox.events_claimed', true) IS DISTINCT FROM '1' THEN
        v := coalesce(pg_sequence_last_value('events_id_seq'::regclass), 0);
        PERFORM pg_advisory_xact_lock_shared(1396834304 + (v >> 31)::int, (v & 2147483647)::int);
        PERFORM set_config('sandbox.events_claimed', '1', true);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_claim BEFORE INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION sandbox_events_claim();

-- The largest id such that every event with an id at or below it has
-- committed or never will. The last value is read before the locks: any id
-- handed out before that read belongs to a transaction whose lock is visible
-- while it runs. Call it in its own statement, before the statement that
-- reads events (which must take its snapshot afterwards).
CREATE FUNCTION sandbox_events_horizon() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v bigint;
    held bigint;
BEGIN
    v := coalesce(pg_sequence_last_value('events_id_seq'::regclass), 0);
    SELECT min(((l.classid::bigint - 1396834304) << 31) + l.objid::bigint) INTO held
      FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.objsubid = 2
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.classid::bigint BETWEEN 1396834304 AND 1396834304 + 65535
       AND l.pid IS DISTINCT FROM pg_backend_pid();
    RETURN least(v, held);
END;
$$;

-- Notify only when rows were inserted. The statement-level trigger of 0002
-- also fired for INSERT … SELECT statements that inserted nothing (the
-- reconcile passes run three each round), and every notification kicks the
-- reconcile loop: an idle controller woke itself hundreds of times a second.
CREATE FUNCTION sandbox_events_notify_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted) THEN
        PERFORM pg_notify('sandbox_wake', '');
    END IF;
    RETURN NULL;
END;
$$;
DROP TRIGGER events_notify ON events;
CREATE TRIGGER events_notify AFTER INSERT ON events REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION sandbox_events_notify_rows();
