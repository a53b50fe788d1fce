-- Rows of :live live sandboxes of tenant :'tenant' (which must exist), spread
-- over :workers workers named live-w0…, each with its create operation
-- (succeeded) and that operation's three events, plus :live/5 deleted
-- sandboxes (with create and delete operations) and a few pending and
-- admitted operations: what 10,000 live sandboxes leave in the database,
-- written directly (no containers). Then ANALYZE. Used by
-- tests/integration/test_explain.sh and tests/bench/live.sh.
-- psql -v live=10000 -v workers=20 -v tenant=NAME -f live_rows.sql
\set ON_ERROR_STOP on
BEGIN;
CREATE TEMP TABLE lr_t AS SELECT id FROM tenants WHERE name = :'tenant';
INSERT INTO workers (id, name, labels, isolation, runtime, cpu_millis, memory_mib, slots, alloc_cpu_millis,
                     alloc_memory_mib, alloc_slots, version, state, networks, last_heartbeat)
SELECT 'wrk_' || translate(lpad(w::text, 26, '0'), '0123456789', 'abcdefghij'), 'live-w' || w, '{}', '{container}',
       'runc', 100000000, 1000000000, 100000, 0, 0, 0, 'bench', 'ready', '{"container":["none"]}',
       now() - interval '1 hour'
  FROM generate_series(0, :workers - 1) w
    ON CONFLICT (name) DO NOTHING; -- workers registered already keep their ids
CREATE TEMP TABLE lr_w AS
SELECT w, (SELECT id FROM workers WHERE name = 'live-w' || w) AS id FROM generate_series(0, :workers - 1) w;
-- 1..live: live (running, on a worker); live+1..live*1.2: deleted.
INSERT INTO sandboxes (id, tenant_id, spec, desired_state, phase, worker_id, allocated, isolation, runtime_ref,
                       cpu_millis, memory_mib, ttl_seconds, expires_at, created_at, updated_at, deleted_at)
SELECT 'sbx_' || translate(lpad(i::text, 26, '0'), '0123456789', 'abcdefghij'), (SELECT id FROM lr_t),
       '{"image":"busybox","network":"none"}', CASE WHEN i <= :live THEN 'running' ELSE 'deleted' END,
       CASE WHEN i <= :live THEN 'running' ELSE 'deleted' END,
       (SELECT id FROM lr_w WHERE w = i % :workers), i <= :live,
       'container', CASE WHEN i <= :live THEN 'c' || i END, 100, 64, 86400, now() + interval '1 day',
       now() - make_interval(secs => (:live * 1.2 - i)::float8), now() - interval '1 hour',
       CASE WHEN i > :live THEN now() - interval '1 hour' END
  FROM generate_series(1, (:live * 1.2)::int) i;
INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, attempt, lease_worker_id, request, deadline,
                        created_at, updated_at, finished_at)
SELECT 'op_' || translate(lpad(i::text, 26, '0'), '0123456789', 'abcdefghij'), s.tenant_id, s.id, 'create',
       'succeeded', 1, s.worker_id, '{}', s.created_at + interval '5 minutes', s.created_at, s.created_at,
       s.created_at + interval '1 second'
  FROM (SELECT row_number() OVER (ORDER BY id) AS i, * FROM sandboxes WHERE id LIKE 'sbx_%') s;
INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, attempt, lease_worker_id, request, deadline,
                        created_at, updated_at, finished_at)
SELECT 'op_' || translate(lpad((i + 900000)::text, 26, '0'), '0123456789', 'abcdefghij'), s.tenant_id, s.id,
       'delete', 'succeeded', 1, s.worker_id, '{}', now(), s.deleted_at, s.deleted_at, s.deleted_at
  FROM (SELECT row_number() OVER (ORDER BY id) AS i, * FROM sandboxes WHERE phase = 'deleted') s;
INSERT INTO events (ts, tenant_id, kind, sandbox_id, operation_id, data)
SELECT o.created_at, o.tenant_id, 'operation.' || st, o.sandbox_id, o.id, jsonb_build_object('to', st)
  FROM operations o, unnest(ARRAY['pending', 'admitted', 'succeeded']) st;
-- A little work in flight.
INSERT INTO sandboxes (id, tenant_id, spec, desired_state, phase, isolation, cpu_millis, memory_mib, ttl_seconds)
SELECT 'sbx_' || translate(lpad((i + 800000)::text, 26, '0'), '0123456789', 'abcdefghij'), (SELECT id FROM lr_t),
       '{"image":"busybox","network":"none"}', 'running', 'pending', 'container', 100, 64, 600
  FROM generate_series(1, 10) i;
INSERT INTO operations (id, tenant_id, sandbox_id, kind, state, request, deadline)
SELECT 'op_' || translate(lpad((i + 800000)::text, 26, '0'), '0123456789', 'abcdefghij'), (SELECT id FROM lr_t),
       'sbx_' || translate(lpad((i + 800000)::text, 26, '0'), '0123456789', 'abcdefghij'), 'create',
       CASE WHEN i <= 5 THEN 'pending' ELSE 'admitted' END, '{}', now() + interval '1 hour'
  FROM generate_series(1, 10) i;
-- Each worker's inventory as its heartbeats keep it.
UPDATE workers w SET inventory = coalesce((SELECT jsonb_agg(jsonb_build_object('sandbox_id', s.id, 'tenant', '',
       'ref', s.runtime_ref, 'state', 'running')) FROM sandboxes s WHERE s.worker_id = w.id AND s.phase = 'running'),
       '[]') WHERE w.name LIKE 'live-w%';
COMMIT;
VACUUM (ANALYZE); -- as autovacuum would soon after such an insert
