-- Sandbox schema, version 14: flat cost at 10,000 live sandboxes.

-- GET /v1/sandboxes pages by keyset, newest first: (created_at, id) below
-- the cursor, on these indexes (read backwards). The tenant one replaces
-- sandboxes_tenant_created, which it covers.
CREATE INDEX sandboxes_list ON sandboxes (created_at, id);
CREATE INDEX sandboxes_tenant_list ON sandboxes (tenant_id, created_at, id);
DROP INDEX sandboxes_tenant_created;

-- A heartbeat sets its worker's live sandboxes aside (never orphans) before
-- it looks up the rest of its inventory: an index-only scan. It replaces
-- sandboxes_worker_live (same rows, worker_id first as there).
CREATE INDEX sandboxes_worker_inventory ON sandboxes (worker_id, id) INCLUDE (phase, updated_at)
    WHERE phase NOT IN ('deleted', 'failed', 'lost');
DROP INDEX sandboxes_worker_live;
-- After an inventory delta, the worker's running sandboxes that changed
-- lately are the ones that can have just gone missing.
CREATE INDEX sandboxes_worker_running ON sandboxes (worker_id, updated_at) WHERE phase = 'running';

-- Heartbeats send inventory changes: the generation of the inventory the
-- controller holds for the worker (what its last applied heartbeat said),
-- which a heartbeat's inventory_delta must name as its base (docs/worker.md).
-- 0 until a full inventory with a generation arrives; a register resets it.
ALTER TABLE workers ADD COLUMN inventory_generation bigint NOT NULL DEFAULT 0;

-- Live counters, so that a create's quota check and placement's spread do
-- not count rows. Per (tenant, worker):
--   live, live_cpu_millis, live_memory_mib: the tenant's sandboxes that count
--     against its quotas (desired_state 'running' and phase not deleted,
--     failed or lost), on the row with worker_id '' (whatever their worker);
--   placed: the tenant's sandboxes on that worker in phase scheduled,
--     provisioning or running (what placement spreads by).
-- A trigger on sandboxes appends each change to sandbox_usage_log in the
-- transaction that makes it (insert only: it takes no lock another
-- transaction could wait for); the reconcile loop folds the log into
-- sandbox_usage (sandbox_usage_fold). A count is always the sum of both, so
-- every snapshot sees exactly what a recount would (sandbox_usage_check
-- compares and appends a correction if ever they differ).
CREATE TABLE sandbox_usage (
    tenant_id        text NOT NULL,
    worker_id        text NOT NULL DEFAULT '',
    live             bigint NOT NULL DEFAULT 0,
    live_cpu_millis  bigint NOT NULL DEFAULT 0,
    live_memory_mib  bigint NOT NULL DEFAULT 0,
    placed           bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, worker_id)
);

CREATE TABLE sandbox_usage_log (
    id               bigserial PRIMARY KEY,
    tenant_id        text NOT NULL,
    worker_id        text NOT NULL DEFAULT '',
    live             bigint NOT NULL DEFAULT 0,
    live_cpu_millis  bigint NOT NULL DEFAULT 0,
    live_memory_mib  bigint NOT NULL DEFAULT 0,
    placed           bigint NOT NULL DEFAULT 0
);
CREATE INDEX sandbox_usage_log_key ON sandbox_usage_log (tenant_id, worker_id);

CREATE FUNCTION sandbox_usage_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    o_live boolean := false;
    n_live boolean := false;
    o_placed boolean := false;
    n_placed boolean := false;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        o_live := OLD.desired_state = 'running' AND OLD.phase NOT IN ('deleted', 'failed', 'lost');
        o_placed := OLD.worker_id IS NOT NULL AND OLD.phase IN ('scheduled', 'provisioning', 'running');
    END IF;
    IF TG_OP <> 'DELETE' THEN
        n_live := NEW.desired_state = 'running' AND NEW.phase NOT IN ('deleted', 'failed', 'lost');
        n_placed := NEW.worker_id IS NOT NULL AND NEW.phase IN ('scheduled', 'provisioning', 'running');
    END IF;
    IF o_live AND n_live AND OLD.tenant_id = NEW.tenant_id AND OLD.cpu_millis = NEW.cpu_millis
       AND OLD.memory_mib = NEW.memory_mib THEN
        o_live := false;
        n_live := false;
    END IF;
    IF o_placed AND n_placed AND OLD.tenant_id = NEW.tenant_id AND OLD.worker_id = NEW.worker_id THEN
        o_placed := false;
        n_placed := false;
    END IF;
    IF o_live THEN
        INSERT INTO sandbox_usage_log (tenant_id, live, live_cpu_millis, live_memory_mib)
            VALUES (OLD.tenant_id, -1, -OLD.cpu_millis, -OLD.memory_mib);
    END IF;
    IF n_live THEN
        INSERT INTO sandbox_usage_log (tenant_id, live, live_cpu_millis, live_memory_mib)
            VALUES (NEW.tenant_id, 1, NEW.cpu_millis, NEW.memory_mib);
    END IF;
    IF o_placed THEN
        INSERT INTO sandbox_usage_log (tenant_id, worker_id, placed) VALUES (OLD.tenant_id, OLD.worker_id, -1);
    END IF;
    IF n_placed THEN
        INSERT INTO sandbox_usage_log (tenant_id, worker_id, placed) VALUES (NEW.tenant_id, NEW.worker_id, 1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER sandboxes_usage_insert AFTER INSERT OR DELETE ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandbox_usage_track();
CREATE TRIGGER sandboxes_usage_update AFTER UPDATE ON sandboxes
    FOR EACH ROW WHEN (OLD.phase IS DISTINCT FROM NEW.phase OR OLD.desired_state IS DISTINCT FROM NEW.desired_state
                       OR OLD.worker_id IS DISTINCT FROM NEW.worker_id OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
                       OR OLD.cpu_millis IS DISTINCT FROM NEW.cpu_millis
                       OR OLD.memory_mib IS DISTINCT FROM NEW.memory_mib)
    EXECUTE FUNCTION sandbox_usage_track();

-- What the counters should be, recounted from the sandboxes.
CREATE VIEW sandbox_usage_recount AS
SELECT tenant_id, worker_id, sum(live)::bigint AS live, sum(live_cpu_millis)::bigint AS live_cpu_millis,
       sum(live_memory_mib)::bigint AS live_memory_mib, sum(placed)::bigint AS placed
  FROM (SELECT tenant_id, '' AS worker_id, 1 AS live, cpu_millis AS live_cpu_millis,
               memory_mib AS live_memory_mib, 0 AS placed
          FROM sandboxes WHERE desired_state = 'running' AND phase NOT IN ('deleted', 'failed', 'lost')
        UNION ALL
        SELECT tenant_id, worker_id, 0, 0, 0, 1
          FROM sandboxes WHERE worker_id IS NOT NULL AND phase IN ('scheduled', 'provisioning', 'running')) x
 GROUP BY tenant_id, worker_id;

-- What the counters hold: the folded rows plus the log not folded yet.
CREATE VIEW sandbox_usage_now AS
SELECT tenant_id, worker_id, sum(live)::bigint AS live, sum(live_cpu_millis)::bigint AS live_cpu_millis,
       sum(live_memory_mib)::bigint AS live_memory_mib, sum(placed)::bigint AS placed
  FROM (SELECT tenant_id, worker_id, live, live_cpu_millis, live_memory_mib, placed FROM sandbox_usage
        UNION ALL
        SELECT tenant_id, worker_id, live, live_cpu_millis, live_memory_mib, placed FROM sandbox_usage_log) x
 GROUP BY tenant_id, worker_id;

-- Folds the log into sandbox_usage (one caller at a time: another returns
-- 0 at once) and drops rows that count nothing. Returns log rows folded.
CREATE FUNCTION sandbox_usage_fold() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(1396834304 - 14) THEN
        RETURN 0;
    END IF;
    WITH d AS (DELETE FROM sandbox_usage_log RETURNING *),
    g AS (SELECT tenant_id, worker_id, sum(live) AS live, sum(live_cpu_millis) AS cpu, sum(live_memory_mib) AS mem,
                 sum(placed) AS placed, count(*) AS rows FROM d GROUP BY tenant_id, worker_id),
    u AS (INSERT INTO sandbox_usage AS s (tenant_id, worker_id, live, live_cpu_millis, live_memory_mib, placed)
          SELECT tenant_id, worker_id, live, cpu, mem, placed FROM g ORDER BY tenant_id, worker_id
          ON CONFLICT (tenant_id, worker_id) DO UPDATE SET live = s.live + EXCLUDED.live,
             live_cpu_millis = s.live_cpu_millis + EXCLUDED.live_cpu_millis,
             live_memory_mib = s.live_memory_mib + EXCLUDED.live_memory_mib, placed = s.placed + EXCLUDED.placed
          RETURNING 1)
    SELECT coalesce(sum(rows), 0) INTO n FROM g;
    IF n > 0 THEN
        DELETE FROM sandbox_usage WHERE live = 0 AND live_cpu_millis = 0 AND live_memory_mib = 0 AND placed = 0;
    END IF;
    RETURN n;
END $$;

-- Compares the counters with a recount in one snapshot and appends the
-- difference to the log (so a wrong counter is right again from the next
-- statement on). Returns the number of (tenant, worker) keys corrected: 0
-- unless something changed sandboxes behind the trigger's back.
CREATE FUNCTION sandbox_usage_check() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint := 0;
BEGIN
    WITH diff AS (
        SELECT coalesce(t.tenant_id, h.tenant_id) AS tenant_id, coalesce(t.worker_id, h.worker_id) AS worker_id,
               coalesce(t.live, 0) - coalesce(h.live, 0) AS live,
               coalesce(t.live_cpu_millis, 0) - coalesce(h.live_cpu_millis, 0) AS cpu,
               coalesce(t.live_memory_mib, 0) - coalesce(h.live_memory_mib, 0) AS mem,
               coalesce(t.placed, 0) - coalesce(h.placed, 0) AS placed
          FROM sandbox_usage_recount t FULL JOIN sandbox_usage_now h
            ON h.tenant_id = t.tenant_id AND h.worker_id = t.worker_id),
    ins AS (INSERT INTO sandbox_usage_log (tenant_id, worker_id, live, live_cpu_millis, live_memory_mib, placed)
            SELECT tenant_id, worker_id, live, cpu, mem, placed FROM diff
             WHERE live <> 0 OR cpu <> 0 OR mem <> 0 OR placed <> 0
            RETURNING 1)
    SELECT count(*) INTO n FROM ins;
    RETURN n;
END $$;

-- The counters of the sandboxes that exist now.
INSERT INTO sandbox_usage (tenant_id, worker_id, live, live_cpu_millis, live_memory_mib, placed)
SELECT tenant_id, worker_id, live, live_cpu_millis, live_memory_mib, placed FROM sandbox_usage_recount;
