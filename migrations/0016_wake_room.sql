-- Wake-ups that say when the reconcile loop may have work (issue 18): an
-- exec, a delete and a create with room are admitted and placed in their
-- own request's transaction, and the controller that took a request kicks
-- its own loop when something was left for it; another controller's loop
-- need not run for every event. ";room" (after ";lease", before ";ops=")
-- says that room was freed or a worker came (a sandbox failed, was lost or
-- deleted; a worker registered, resumed or was heard again; an operation
-- went back to admitted from a worker), so a create waiting for room may
-- be placed now by any controller. Controllers that predate this read the
-- unknown ";room" as the empty payload (re-check all, run the loop).
CREATE OR REPLACE FUNCTION sandbox_events_notify_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    leased boolean;
    room boolean;
    ended text;
BEGIN
    SELECT count(*), bool_or(kind = 'operation.leased'),
           bool_or(kind IN ('sandbox.failed', 'sandbox.lost', 'sandbox.deleted', 'worker.registered',
                            'worker.resumed', 'worker.ready')
                   OR (kind = 'operation.admitted' AND data->>'from' IN ('leased', 'running'))),
           string_agg(DISTINCT operation_id, ',') FILTER (WHERE kind IN
             ('operation.succeeded', 'operation.failed', 'operation.cancelled'))
      INTO n, leased, room, ended FROM inserted;
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    IF ended IS NOT NULL AND length(ended) > 7000 THEN
        PERFORM pg_notify('sandbox_wake', '');
    ELSE
        PERFORM pg_notify('sandbox_wake', 'ev' || CASE WHEN leased THEN ';lease' ELSE '' END
                                          || CASE WHEN room THEN ';room' ELSE '' END
                                          || coalesce(';ops=' || ended, ''));
    END IF;
    RETURN NULL;
END;
$$;
