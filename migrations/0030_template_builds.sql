-- Template builds the server drives (issue 32): a build is a list of exec
-- requests run in order in a build sandbox of the tenant's, then a snapshot
-- of it as the template's next version, then the sandbox's delete. The
-- controller's reconcile loop takes each step as an operation of its own,
-- made with an idempotency key of the build's (tb-ID-N), so a controller
-- that dies between making a step's operation and noting it here makes the
-- same operation again, never a second one. No foreign keys to sandboxes or
-- operations: retention prunes those on its own, and a build row after them.
-- A build requested through E2B's API (POST /v3/templates) waits, with no
-- sandbox yet, for its steps (POST /v2/templates/{id}/builds/{build}).
CREATE TABLE template_builds (
    id            text PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants(id),
    template      text NOT NULL,
    state         text NOT NULL CHECK (state IN ('waiting', 'building', 'snapshotting', 'ready', 'failed',
                                                 'cancelled')),
    steps         jsonb NOT NULL,            -- [exec request, ...] as POST /exec takes them
    config        jsonb,                     -- the version's defaults (a snapshot's config)
    sandbox_id    text,                      -- NULL while waiting
    request       jsonb,                     -- waiting: the build sandbox's create request so far
    step_names    jsonb,                     -- [name, ...] per step, when the asker named them (E2B)
    step          integer NOT NULL DEFAULT 0, -- steps started so far
    operation_id  text,                      -- the step's (or snapshot's) operation being waited on
    results       jsonb NOT NULL DEFAULT '[]'::jsonb, -- [{"operation","state","exit_code"}] per step done
    snapshot_id   text,
    version       integer,
    error_code    text,
    error_message text,
    cleaned       boolean NOT NULL DEFAULT false, -- its build sandbox's delete asked for
    created_by    text,
    idempotency_key text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);
CREATE INDEX template_builds_active ON template_builds (created_at) WHERE NOT cleaned;
CREATE INDEX template_builds_tenant ON template_builds (tenant_id, template, created_at DESC);
CREATE UNIQUE INDEX template_builds_idempotency ON template_builds (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
