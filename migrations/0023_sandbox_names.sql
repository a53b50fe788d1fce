-- A sandbox may have a name (POST /v1/sandboxes {"name":…}, `sandbox create
-- --name`), usable wherever its id is. Unique within its tenant among the
-- sandboxes not deleted: deleting one frees its name, as `docker rm` does.
ALTER TABLE sandboxes ADD COLUMN name text;
CREATE UNIQUE INDEX sandboxes_tenant_name ON sandboxes (tenant_id, name)
    WHERE name IS NOT NULL AND desired_state = 'running';
-- An admin's lookup by name alone (a member's goes by tenant and name).
CREATE INDEX sandboxes_name ON sandboxes (name) WHERE name IS NOT NULL AND desired_state = 'running';
