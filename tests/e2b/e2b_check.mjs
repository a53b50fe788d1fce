// The official E2B SDK (npm e2b, pinned in package.json) against a real
// Sandbox controller, configured only by its environment:
//   E2B_API_URL=URL/e2b  E2B_SANDBOX_URL=URL/e2b/envd  E2B_API_KEY=<Sandbox token>
// Run by tests/integration/test_e2b.sh, which also passes:
//   E2B_CHECK_ROUTE   the route listener's address (host:port) for getHost
//   E2B_CHECK_PARTS   which parts to run (comma-separated; default all): control
//                     (the control API alone) and envd (commands, files)
// Prints one line per check; exits non-zero on the first failure. The
// timing line (create -> first command) is read by the shell test.
import { Sandbox, CommandExitError, NotFoundError, SandboxNotFoundError, AuthenticationError } from 'e2b';
import assert from 'node:assert/strict';
import http from 'node:http';

const parts = new Set((process.env.E2B_CHECK_PARTS || 'all').split(','));
const want = (p) => parts.has('all') || parts.has(p);
const log = (...a) => console.log('e2b-check:', ...a);
const created = [];

async function expectReject(promise, cls, what) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof cls, `${what}: expected ${cls.name}, got ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
    return e;
  }
  assert.fail(`${what}: expected ${cls.name}, but it succeeded`);
}

async function main() {
  const label = `e2b-check-${process.pid}`;
  const t0 = performance.now();
  const sbx = await Sandbox.create({ metadata: { suite: label, role: 'main' }, timeoutMs: 600_000 });
  created.push(sbx);
  const tCreated = performance.now();
  log('created', sbx.sandboxId);

  if (want('envd')) {
    // ---- a foreground command: exit code, stdout, stderr, env, cwd
    const r = await sbx.commands.run('echo out-$GREETING; echo err >&2; pwd', { envs: { GREETING: 'hi' }, cwd: '/tmp' });
    const tFirst = performance.now();
    log(`timing create_ms=${Math.round(tCreated - t0)} first_command_ms=${Math.round(tFirst - tCreated)} total_ms=${Math.round(tFirst - t0)}`);
    assert.equal(r.exitCode, 0, 'exit code of the first command');
    assert.equal(r.stdout, 'out-hi\n/tmp\n', 'stdout with env and cwd');
    assert.equal(r.stderr, 'err\n', 'stderr');
    const failed = await expectReject(sbx.commands.run('echo before; exit 7'), CommandExitError, 'a command exiting 7');
    assert.equal(failed.exitCode, 7, 'CommandExitError.exitCode');
    assert.equal(failed.stdout, 'before\n', 'stdout of the failed command');
    log('foreground commands ok');
  } else {
    log(`timing create_ms=${Math.round(tCreated - t0)}`);
  }

  // ---- info, list with a metadata filter, set timeout
  const info = await sbx.getInfo();
  assert.equal(info.sandboxId, sbx.sandboxId);
  assert.equal(info.metadata.suite, label);
  assert.equal(info.state, 'running');
  const other = await Sandbox.create({ metadata: { suite: label, role: 'other' }, timeoutMs: 120_000 });
  created.push(other);
  const page = await Sandbox.list({ query: { metadata: { suite: label, role: 'main' } } }).nextItems();
  assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId], `list with a metadata filter: ${JSON.stringify(page)}`);
  const both = await Sandbox.list({ query: { metadata: { suite: label } } }).nextItems();
  assert.equal(both.length, 2, 'list by suite');
  const paused = await Sandbox.list({ query: { metadata: { suite: label }, state: ['paused'] } }).nextItems();
  assert.equal(paused.length, 0, 'nothing is paused');
  const before = new Date(info.endAt).getTime();
  await sbx.setTimeout(1_800_000);
  const after = new Date((await sbx.getInfo()).endAt).getTime();
  assert.ok(after > before + 600_000, `setTimeout moved endAt (${info.endAt} -> ${new Date(after).toISOString()})`);
  log('info, list, setTimeout ok');

  // ---- a second client connecting to the same sandbox
  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal(again.sandboxId, sbx.sandboxId);
  if (want('envd')) {
    const r2 = await again.commands.run('echo from-second-client');
    assert.equal(r2.stdout, 'from-second-client\n');
  }
  log('second client ok');

  // ---- kill, and what a missing sandbox raises
  assert.equal(await other.kill(), true, 'kill of a running sandbox');
  assert.equal(await Sandbox.kill(other.sandboxId), false, 'kill of a killed sandbox is false');
  await expectReject(Sandbox.getInfo('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'), SandboxNotFoundError, 'getInfo of a missing sandbox');
  await expectReject(Sandbox.connect('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'), NotFoundError, 'connect to a missing sandbox');
  assert.equal(await other.isRunning(), false, 'isRunning of a killed sandbox');
  await expectReject(Sandbox.list({ apiKey: 'sbt_aaaaaaaaaaaaaaaaaaaaaaaaaa_' + 'a'.repeat(43) }).nextItems(),
    AuthenticationError, 'a wrong API key');
  log('kill and errors ok');

  await sbx.kill();
  assert.equal(await sbx.isRunning(), false, 'isRunning after kill');
  await expectReject(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError, 'getInfo of a killed sandbox');
  log('all ok');
}

main().then(() => process.exit(0), async (e) => {
  console.error('e2b-check: FAILED:', e && e.stack ? e.stack : e);
  for (const s of created) {
    try { await s.kill(); } catch { /* the shell test deletes what is left */ }
  }
  process.exit(1);
});
