-- Sandbox schema, version 3: what AEGIS placement needs to know and keep.

-- Per worker: the network modes each offered isolation class provides
-- ({"container":["none","restricted","open"],"gvisor":["none"]}), the result
-- of each class's probe ({"gvisor":"ok: ..."}), and the images present
-- (refreshed by heartbeats; used to prefer a worker that need not pull).
ALTER TABLE workers
    ADD COLUMN networks jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN probes   jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN images   jsonb NOT NULL DEFAULT '[]'::jsonb;

-- Per sandbox: the trust classification that decided its minimum isolation
-- class and hardening, with the reasons shown by `sandbox get`. The
-- isolation column becomes the class it was placed on.
ALTER TABLE sandboxes ADD COLUMN classification jsonb;

-- Sandboxes of one tenant per worker, for the spread score.
CREATE INDEX sandboxes_tenant_worker ON sandboxes (tenant_id, worker_id) WHERE worker_id IS NOT NULL;
