-- Sandbox schema, version 2: the cluster identity and cross-controller wake-ups.

-- One row: the identity of this installation. Workers label every runtime
-- object with it, so two installations sharing a Docker host never take
-- each other's containers for orphans.
CREATE TABLE cluster (
    id          text PRIMARY KEY,
    singleton   boolean NOT NULL DEFAULT true UNIQUE CHECK (singleton),
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO cluster (id) VALUES ('cl_' || substr(md5(random()::text || clock_timestamp()::text), 1, 20));

-- Every committed batch of events wakes the long-polls and reconcile loops
-- of every controller on this database (delivered at commit, deduplicated
-- within a transaction).
CREATE FUNCTION sandbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sandbox_wake', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION sandbox_events_notify();

-- Sandboxes of a worker, for worker loss and inventory reconciliation.
CREATE INDEX sandboxes_worker_phase ON sandboxes (worker_id, phase);

-- Sandboxes whose deletion has not completed (the delete-retry pass).
CREATE INDEX sandboxes_undeleted ON sandboxes (updated_at) WHERE desired_state = 'deleted' AND phase <> 'deleted';
