-- Sandbox schema, version 1: tenants, tokens, workers, sandboxes, operations, events.
-- Applied by `sandboxd migrate` (and at controller start) under an advisory lock.
-- Never edit this file once landed: add a new NNNN_name.sql instead.

CREATE TABLE tenants (
    id          text PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    policy      jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_tokens (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants(id),
    role        text NOT NULL CHECK (role IN ('admin', 'member', 'worker')),
    name        text NOT NULL DEFAULT '',
    hash        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    revoked_at  timestamptz
);

CREATE TABLE workers (
    id                 text PRIMARY KEY,
    name               text NOT NULL UNIQUE,
    labels             jsonb NOT NULL DEFAULT '{}'::jsonb,
    isolation          text[] NOT NULL,
    runtime            text NOT NULL,
    cpu_millis         bigint NOT NULL CHECK (cpu_millis >= 0),
    memory_mib         bigint NOT NULL CHECK (memory_mib >= 0),
    slots              integer NOT NULL CHECK (slots >= 0),
    alloc_cpu_millis   bigint NOT NULL DEFAULT 0 CHECK (alloc_cpu_millis >= 0),
    alloc_memory_mib   bigint NOT NULL DEFAULT 0 CHECK (alloc_memory_mib >= 0),
    alloc_slots        integer NOT NULL DEFAULT 0 CHECK (alloc_slots >= 0),
    version            text NOT NULL DEFAULT '',
    state              text NOT NULL CHECK (state IN ('ready', 'draining', 'lost')),
    inventory          jsonb NOT NULL DEFAULT '[]'::jsonb,
    last_heartbeat     timestamptz NOT NULL DEFAULT now(),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sandboxes (
    id                   text PRIMARY KEY,
    tenant_id            text NOT NULL REFERENCES tenants(id),
    spec                 jsonb NOT NULL,
    desired_state        text NOT NULL CHECK (desired_state IN ('running', 'deleted')),
    phase                text NOT NULL CHECK (phase IN ('pending', 'scheduled', 'provisioning', 'running',
                                                        'deleting', 'deleted', 'failed', 'lost')),
    worker_id            text REFERENCES workers(id),
    allocated            boolean NOT NULL DEFAULT false,
    isolation            text NOT NULL,
    runtime_ref          text,
    cpu_millis           bigint NOT NULL,
    memory_mib           bigint NOT NULL,
    ttl_seconds          bigint NOT NULL,
    expires_at           timestamptz,
    generation           bigint NOT NULL DEFAULT 1,
    observed_generation  bigint NOT NULL DEFAULT 0,
    created_by           text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    deleted_at           timestamptz
);
CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant_id, created_at DESC);
CREATE INDEX sandboxes_expiring ON sandboxes (expires_at) WHERE desired_state = 'running' AND expires_at IS NOT NULL;
CREATE INDEX sandboxes_worker_live ON sandboxes (worker_id) WHERE phase NOT IN ('deleted', 'failed', 'lost');

CREATE TABLE operations (
    id                text PRIMARY KEY,
    tenant_id         text NOT NULL REFERENCES tenants(id),
    sandbox_id        text NOT NULL REFERENCES sandboxes(id),
    kind              text NOT NULL CHECK (kind IN ('create', 'delete', 'exec')),
    state             text NOT NULL CHECK (state IN ('pending', 'admitted', 'leased', 'running',
                                                     'succeeded', 'failed', 'cancelled')),
    attempt           integer NOT NULL DEFAULT 0,
    lease_worker_id   text REFERENCES workers(id),
    lease_expires_at  timestamptz,
    idempotency_key   text,
    request_hash      text,
    request           jsonb NOT NULL DEFAULT '{}'::jsonb,
    result            jsonb,
    error_code        text,
    error_message     text,
    placement         jsonb,
    deadline          timestamptz NOT NULL,
    created_by        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);
CREATE UNIQUE INDEX operations_idempotency ON operations (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX operations_active ON operations (state, created_at) WHERE state IN ('pending', 'admitted', 'leased', 'running');
CREATE INDEX operations_leases ON operations (lease_worker_id, state) WHERE state IN ('leased', 'running');
CREATE INDEX operations_sandbox ON operations (sandbox_id, created_at DESC);

CREATE TABLE events (
    id            bigserial PRIMARY KEY,
    ts            timestamptz NOT NULL DEFAULT now(),
    tenant_id     text,
    kind          text NOT NULL,
    sandbox_id    text,
    operation_id  text,
    data          jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX events_operation ON events (operation_id, id) WHERE operation_id IS NOT NULL;
CREATE INDEX events_sandbox ON events (sandbox_id, id) WHERE sandbox_id IS NOT NULL;
