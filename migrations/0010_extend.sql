-- Sandbox schema, version 10: extend, a sandbox's TTL moved by an operation
-- the controller completes alone (POST /v1/sandboxes/{id}/extend).

ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check
    CHECK (kind IN ('create', 'delete', 'exec', 'share', 'unshare', 'extend'));
