-- Live exec output bounded per tenant (issue 27): each exec kept up to
-- exec_output_keep_bytes, but a tenant's execs together had no bound (six
-- execs put 107 MB into exec_output, kept with their operations for the
-- retention period). The store keeps a tenant under its bound in the
-- append's transaction, reading the tenant's counter below (one row), not a
-- sum over its chunks.

-- Each chunk names its operation's tenant: the counter follows a chunk
-- even when it goes with its operation (retention's cascade runs when the
-- operation row is already gone), and the tenant's chunks are found oldest
-- first without its operations.
ALTER TABLE exec_output ADD COLUMN tenant_id text;
UPDATE exec_output e SET tenant_id = o.tenant_id FROM operations o WHERE o.id = e.operation_id;
ALTER TABLE exec_output ALTER COLUMN tenant_id SET NOT NULL;
CREATE INDEX exec_output_tenant ON exec_output (tenant_id, created_at, operation_id, byte_offset);

-- A chunk written without it (a controller older than this migration,
-- during an upgrade) gets its operation's.
CREATE FUNCTION exec_output_tenant_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.tenant_id := (SELECT o.tenant_id FROM operations o WHERE o.id = NEW.operation_id);
    RETURN NEW;
END $$;
CREATE TRIGGER exec_output_tenant_fill BEFORE INSERT ON exec_output
    FOR EACH ROW WHEN (NEW.tenant_id IS NULL) EXECUTE FUNCTION exec_output_tenant_fill();

-- The bytes each tenant keeps in exec_output, kept by the triggers below
-- in the transaction of every change (appends, trims, retention), each
-- statement's rows summed per tenant and the counters locked in tenant
-- order (two statements that change several tenants' never deadlock on
-- them). Backfilled from the chunks there are.
CREATE TABLE exec_output_usage (
    tenant_id  text PRIMARY KEY,
    bytes      bigint NOT NULL DEFAULT 0
);
INSERT INTO exec_output_usage (tenant_id, bytes)
    SELECT tenant_id, sum(length(data)) FROM exec_output GROUP BY tenant_id;

CREATE FUNCTION exec_output_usage_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO exec_output_usage AS u (tenant_id, bytes)
        SELECT d.tenant_id, d.n FROM (
            SELECT tenant_id, sum(length(data))::bigint AS n FROM new_rows GROUP BY tenant_id) d
         ORDER BY d.tenant_id
    ON CONFLICT (tenant_id) DO UPDATE SET bytes = u.bytes + EXCLUDED.bytes;
    RETURN NULL;
END $$;

CREATE FUNCTION exec_output_usage_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO exec_output_usage AS u (tenant_id, bytes)
        SELECT d.tenant_id, d.n FROM (
            SELECT tenant_id, sum(n)::bigint AS n FROM (
                SELECT tenant_id, length(data) AS n FROM new_rows
                UNION ALL SELECT tenant_id, -length(data) FROM old_rows) x
             GROUP BY tenant_id) d
         WHERE d.n <> 0
         ORDER BY d.tenant_id
    ON CONFLICT (tenant_id) DO UPDATE SET bytes = u.bytes + EXCLUDED.bytes;
    RETURN NULL;
END $$;

CREATE FUNCTION exec_output_usage_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM exec_output_usage WHERE tenant_id IN (SELECT tenant_id FROM old_rows)
     ORDER BY tenant_id FOR NO KEY UPDATE;
    UPDATE exec_output_usage u SET bytes = u.bytes - d.n
      FROM (SELECT tenant_id, sum(length(data))::bigint AS n FROM old_rows GROUP BY tenant_id) d
     WHERE u.tenant_id = d.tenant_id;
    RETURN NULL;
END $$;

CREATE TRIGGER exec_output_usage_insert AFTER INSERT ON exec_output REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION exec_output_usage_add();
CREATE TRIGGER exec_output_usage_update AFTER UPDATE ON exec_output
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION exec_output_usage_change();
CREATE TRIGGER exec_output_usage_delete AFTER DELETE ON exec_output REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION exec_output_usage_remove();
