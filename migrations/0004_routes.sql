-- Sandbox schema, version 4: public routes (share a sandbox port over HTTP).

-- Share and unshare are operations like any other mutation.
ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check
    CHECK (kind IN ('create', 'delete', 'exec', 'share', 'unshare'));

-- One row per route. `name` is the random, unguessable label in the
-- route's address ({name}.{route_domain} or {public_url}/r/{name}/); a
-- token-protected route keeps only the BLAKE2b hash of its access token.
-- A route is removed (never deleted) in the same transaction as whatever
-- ends it: unshare, the sandbox leaving `running`, or its expiry.
CREATE TABLE routes (
    id              text PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    sandbox_id      text NOT NULL REFERENCES sandboxes(id),
    tenant_id       text NOT NULL REFERENCES tenants(id),
    port            integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    auth            text NOT NULL CHECK (auth IN ('public', 'token')),
    secret_hash     text,
    state           text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'removed')),
    expires_at      timestamptz,
    created_by      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    removed_at      timestamptz,
    removed_reason  text,
    CHECK ((auth = 'token') = (secret_hash IS NOT NULL))
);
CREATE INDEX routes_sandbox_active ON routes (sandbox_id) WHERE state = 'active';
CREATE INDEX routes_expiry ON routes (expires_at) WHERE state = 'active' AND expires_at IS NOT NULL;
