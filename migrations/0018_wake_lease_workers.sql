-- A lease's wake-up names its workers (issue 18): ";lease=ID,ID" (the
-- lease_worker_id of each operation the statement leased) instead of a
-- bare ";lease". A controller then resumes the parked polls of those
-- workers alone, where a bare ";lease" made it ask PostgreSQL which of all
-- its parked workers have leases (a round trip per wake-up, about one an
-- operation). A bare ";lease" is still sent when no worker can be named,
-- and a controller that predates this reads the unknown ";lease=" as the
-- empty payload (re-check all, run the loop). Otherwise as 0017.
CREATE OR REPLACE FUNCTION sandbox_events_notify_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sandbox_wake',
                      CASE WHEN length(coalesce(x.ended, '') || coalesce(x.workers, '')) > 7000 THEN ''
                           ELSE 'ev' || CASE WHEN x.leased THEN ';lease' || coalesce('=' || x.workers, '')
                                             ELSE '' END
                                     || CASE WHEN x.room THEN ';room' ELSE '' END
                                     || coalesce(';ops=' || x.ended, '') END)
       FROM (SELECT y.*,
                    -- the workers leased to, read only when something
                    -- was; none named when one of them cannot be
                    CASE WHEN y.leased THEN
                      (SELECT CASE WHEN count(*) = count(o.lease_worker_id)
                                   THEN string_agg(DISTINCT o.lease_worker_id, ',') END
                         FROM inserted i LEFT JOIN operations o ON o.id = i.operation_id
                        WHERE i.kind = 'operation.leased')
                    END AS workers
               FROM (SELECT count(*) AS n, bool_or(kind = 'operation.leased') AS leased,
                            bool_or(kind IN ('sandbox.failed', 'sandbox.lost', 'sandbox.deleted',
                                             'worker.registered', 'worker.resumed', 'worker.ready')
                                    OR (kind = 'operation.admitted' AND data->>'from' IN ('leased', 'running')))
                              AS room,
                            string_agg(DISTINCT operation_id, ',') FILTER (WHERE kind IN
                              ('operation.succeeded', 'operation.failed', 'operation.cancelled')) AS ended
                       FROM inserted) y) x
      WHERE x.n > 0;
    RETURN NULL;
END;
$$;
