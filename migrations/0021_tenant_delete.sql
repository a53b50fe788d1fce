-- Tenants can be deleted (DELETE /v1/tenants/{name}, refused while the
-- tenant owns live sandboxes or warm pools). The row stays for the history
-- that names it (sandboxes, operations, events, routes, tokens), marked here
-- and renamed NAME.deleted.ID: out of every list and lookup by name, the
-- name free for a new tenant; its tokens are revoked in the same transaction.
ALTER TABLE tenants ADD COLUMN deleted_at timestamptz;
