-- Wake-ups that say what changed (issue 18): the NOTIFY of an events insert
-- names the operations that reached a terminal state and whether one was
-- leased, so a controller re-checks only the parked requests that can have
-- been answered by it: "ev", then ";lease" when an operation was leased,
-- then ";ops=ID,ID…" for the operations that ended. Too many to name in one
-- notification (over 7000 bytes): the empty payload, which re-checks all,
-- as before. Controllers that predate this read any payload but "output" as
-- the empty one.
CREATE OR REPLACE FUNCTION sandbox_events_notify_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    leased boolean;
    ended text;
BEGIN
    SELECT count(*), bool_or(kind = 'operation.leased'),
           string_agg(DISTINCT operation_id, ',') FILTER (WHERE kind IN
             ('operation.succeeded', 'operation.failed', 'operation.cancelled'))
      INTO n, leased, ended FROM inserted;
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    IF ended IS NOT NULL AND length(ended) > 7000 THEN
        PERFORM pg_notify('sandbox_wake', '');
    ELSE
        PERFORM pg_notify('sandbox_wake', 'ev' || CASE WHEN leased THEN ';lease' ELSE '' END
                                          || coalesce(';ops=' || ended, ''));
    END IF;
    RETURN NULL;
END;
$$;
