-- Sandbox schema, version 11: live exec output.

-- The output of a running (or finished) exec as the worker sent it, in
-- chunks at byte offsets over both streams (stdout and stderr interleaved in
-- the order the worker read them). Bounded per operation by the setting
-- exec_output_keep_bytes (the oldest chunks go first); goes with its
-- operation (retention).
CREATE TABLE exec_output (
    operation_id  text NOT NULL REFERENCES operations(id) ON DELETE CASCADE,
    byte_offset   bigint NOT NULL CHECK (byte_offset >= 0),
    stream        text NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    data          bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation_id, byte_offset)
);

-- A client asked to cancel this running exec (POST /v1/operations/{id}/cancel):
-- the worker holding it learns it from its heartbeat's answer, kills the
-- command's process tree and reports it cancelled.
ALTER TABLE operations ADD COLUMN cancel_requested_at timestamptz;
CREATE INDEX operations_cancel_requested ON operations (lease_worker_id)
    WHERE state = 'running' AND cancel_requested_at IS NOT NULL;
