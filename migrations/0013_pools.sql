-- Sandbox schema, version 13: warm pools.

-- A pool keeps `size` sandboxes of one spec created and running ahead of
-- demand (the reconcile loop's pool_refill pass adds their creates). A
-- create whose spec matches takes one (claims it) in its own transaction.
-- tenant_id NULL: any tenant may claim (only an admin declares those).
CREATE TABLE pools (
    id          text PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    tenant_id   text REFERENCES tenants(id),
    spec        jsonb NOT NULL,          -- the members' canonical sandbox spec
    match_key   text NOT NULL,           -- what a create must equal to take a member (store_pool_key)
    isolation   text NOT NULL,
    cpu_millis  bigint NOT NULL,
    memory_mib  bigint NOT NULL,
    size        integer NOT NULL CHECK (size >= 0),
    hits        bigint NOT NULL DEFAULT 0,
    misses      bigint NOT NULL DEFAULT 0,
    refills     bigint NOT NULL DEFAULT 0,
    created_by  text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pools_match ON pools (match_key);

-- Unclaimed members belong to this tenant, so no tenant's quota is charged
-- for sandboxes it has not claimed; its name cannot be made through the API
-- (tenant names start with a letter or digit).
INSERT INTO tenants (id, name) VALUES ('_pools', '_pools') ON CONFLICT DO NOTHING;

-- A member: pool_id set. claimed_at NULL: not yet handed out (owned by
-- '_pools'); set once, in the claiming create's transaction, when the row
-- gets the claimer's tenant, spec (labels, TTL) and created_by. A pool
-- never recycles: a claimed sandbox is never a member again.
ALTER TABLE sandboxes ADD COLUMN pool_id text REFERENCES pools(id) ON DELETE SET NULL;
ALTER TABLE sandboxes ADD COLUMN claimed_at timestamptz;
CREATE INDEX sandboxes_pool_ready ON sandboxes (pool_id, created_at)
    WHERE pool_id IS NOT NULL AND claimed_at IS NULL AND desired_state = 'running';
-- Every row of a pool (claimed ones too), for the foreign key's ON DELETE.
CREATE INDEX sandboxes_pool ON sandboxes (pool_id) WHERE pool_id IS NOT NULL;
