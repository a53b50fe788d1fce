-- Snapshots (issue 32): a sandbox's filesystem saved on the worker it runs
-- on, owned by a tenant, as an operation of kind 'snapshot'. The row says
-- whose it is and where its bytes are; its state comes from the row and its
-- operation (ready once the worker reported it, failed when the operation
-- failed, deleted once asked). A worker's heartbeat lists the snapshots it
-- holds, and the controller answers with those no live row wants there.
ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check
    CHECK (kind IN ('create', 'delete', 'exec', 'share', 'unshare', 'extend', 'snapshot'));

CREATE TABLE snapshots (
    id            text PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants(id),
    name          text,
    sandbox_id    text NOT NULL REFERENCES sandboxes(id),
    worker_id     text REFERENCES workers(id),
    operation_id  text NOT NULL,
    image         text NOT NULL,   -- the source sandbox's image (its base)
    isolation     text NOT NULL,   -- the source sandbox's class
    size_bytes    bigint,          -- what it adds to its base, once made
    image_bytes   bigint,          -- its whole filesystem, once made
    created_by    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    ready_at      timestamptz,
    deleted_at    timestamptz
);
CREATE UNIQUE INDEX snapshots_name ON snapshots (tenant_id, name) WHERE deleted_at IS NULL AND name IS NOT NULL;
CREATE INDEX snapshots_tenant ON snapshots (tenant_id, created_at DESC) WHERE deleted_at IS NULL;
CREATE INDEX snapshots_worker ON snapshots (worker_id) WHERE deleted_at IS NULL;
CREATE INDEX snapshots_operation ON snapshots (operation_id);
