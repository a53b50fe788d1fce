-- Copies of a snapshot on other workers (issue 32): an operation of kind
-- 'snapshot_copy' leased to the worker that takes the copy, which reads the
-- snapshot's bytes through the controller from a worker holding it and
-- keeps them as its own. A copy is wanted while its snapshot is and its
-- operation has not failed; a sandbox from the snapshot may be placed on
-- any worker holding a ready copy.
ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check
    CHECK (kind IN ('create', 'delete', 'exec', 'share', 'unshare', 'extend', 'snapshot', 'pause', 'resume',
                    'snapshot_copy'));

CREATE TABLE snapshot_copies (
    snapshot_id   text NOT NULL REFERENCES snapshots(id),
    worker_id     text NOT NULL REFERENCES workers(id),
    source_worker_id text REFERENCES workers(id),
    operation_id  text NOT NULL,
    image_bytes   bigint,
    created_at    timestamptz NOT NULL DEFAULT now(),
    ready_at      timestamptz,
    PRIMARY KEY (snapshot_id, worker_id)
);
CREATE INDEX snapshot_copies_worker ON snapshot_copies (worker_id);
CREATE INDEX snapshot_copies_operation ON snapshot_copies (operation_id);

-- A volume create may carry an Idempotency-Key: the same key in the same
-- tenant answers with the volume it made (a retry whose answer was lost).
ALTER TABLE volumes ADD COLUMN idempotency_key text;
CREATE UNIQUE INDEX volumes_idempotency ON volumes (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
