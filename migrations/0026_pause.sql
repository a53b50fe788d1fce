-- Pause and resume (issue 32): a running sandbox can be paused (phase
-- 'paused': its processes stopped, its files and its place on the worker
-- kept) and resumed (running again, same id, files and routes), each an
-- operation leased to its worker. While paused, its TTL clock stops: the
-- seconds it had left are kept in paused_ttl_seconds and expires_at is
-- cleared; a resume sets expires_at from them. pause_memory says whether
-- its memory was kept (false: a resume restarts its main process).
ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_phase_check;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_phase_check
    CHECK (phase IN ('pending', 'scheduled', 'provisioning', 'running', 'paused', 'deleting', 'deleted', 'failed',
                     'lost'));
ALTER TABLE sandboxes ADD COLUMN paused_at timestamptz;
ALTER TABLE sandboxes ADD COLUMN paused_ttl_seconds bigint;
ALTER TABLE sandboxes ADD COLUMN pause_memory boolean;

ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check
    CHECK (kind IN ('create', 'delete', 'exec', 'share', 'unshare', 'extend', 'snapshot', 'pause', 'resume'));
