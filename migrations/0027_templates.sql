-- Templates (issue 32): a template is a name whose versions are snapshots
-- (version 1, 2, ...: a rebuild adds one; a create takes the latest ready
-- version unless it names one), each with the defaults its build set
-- (config: env, workdir, user, cmd, entrypoint, expose). A version number
-- is never reused, also after a delete.
ALTER TABLE snapshots ADD COLUMN template text;
ALTER TABLE snapshots ADD COLUMN version integer;
ALTER TABLE snapshots ADD COLUMN config jsonb;
CREATE UNIQUE INDEX snapshots_template_version ON snapshots (tenant_id, template, version) WHERE template IS NOT NULL;
