// The official E2B SDK (npm e2b, pinned in package.json) against a real
// Sandbox controller, configured only by its environment:
//   E2B_API_URL=URL/e2b  E2B_SANDBOX_URL=URL/e2b/envd  E2B_API_KEY=<Sandbox token>
// Run by tests/integration/test_e2b.sh, which also passes:
//   E2B_CHECK_ROUTE   the route listener's address (host:port) for getHost
//   E2B_CHECK_PARTS   which parts to run (comma-separated; default all): control
//                     (the control API alone), envd (commands, files) and
//                     template (Template.build)
//   E2B_CHECK_IMAGE   the image template builds start from
// Prints one line per check; exits non-zero on the first failure. The
// timing line (create -> first command) is read by the shell test.
import {
  Sandbox, Template, BuildError, CommandExitError, NotFoundError, SandboxNotFoundError, AuthenticationError, InvalidArgumentError,
  TimeoutError, RateLimitError,
} from 'e2b';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, fn, ms = 20_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

// An HTTP GET of path on the route listener, the Host header naming the
// sandbox's port (sandbox.getHost); resolves {status, body}.
function getViaHost(route, host, headers = {}) {
  const [h, port] = route.split(':');
  return new Promise((resolve, reject) => {
    const req = http.request({ host: h, port: Number(port), path: '/', headers: { Host: host, ...headers } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error('timed out')));
    req.end();
  });
}

async function envdChecks(sbx) {
  // ---- a background command: output before it ends, listed, killed
  let early = '';
  const bg = await sbx.commands.run('echo started; sleep 60; echo never', {
    background: true, timeoutMs: 0, onStdout: (d) => { early += d; },
  });
  await until('the background command\'s first line', () => early.includes('started\n'));
  const listed = await sbx.commands.list();
  assert.ok(listed.some((p) => p.pid === bg.pid), `commands.list shows the background pid ${bg.pid}: ${JSON.stringify(listed)}`);
  assert.equal(await bg.kill(), true, 'kill of a running command');
  const killed = await expectReject(bg.wait(), CommandExitError, 'wait of a killed command');
  assert.notEqual(killed.exitCode, 0, 'a killed command\'s exit code');
  assert.ok(!bg.stdout.includes('never'), 'the killed command did not go on');
  assert.equal(await sbx.commands.kill(bg.pid), false, 'kill of a pid that has ended');
  log('background command ok');

  // ---- stdin to a running process
  const cat = await sbx.commands.run('cat; echo eof', { background: true, stdin: true, timeoutMs: 0 });
  await sbx.commands.sendStdin(cat.pid, 'hello stdin\n');
  await until('cat echoing its stdin', () => cat.stdout.includes('hello stdin\n'));
  await sbx.commands.closeStdin(cat.pid);
  const catEnd = await cat.wait();
  assert.equal(catEnd.exitCode, 0);
  assert.equal(catEnd.stdout, 'hello stdin\neof\n', 'stdin, then its end');
  log('stdin ok');

  // ---- a PTY session with resize
  let screen = '';
  const dec = new TextDecoder();
  const pty = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: (d) => { screen += dec.decode(d, { stream: true }); } });
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo tty-$TERM\n'));
  await until('the terminal\'s size', () => /24 80/.test(screen) && screen.includes('tty-xterm'));
  await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'));
  await until('the resized terminal', () => /30 100/.test(screen));
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('exit 0\n'));
  const ptyEnd = await pty.wait();
  assert.equal(ptyEnd.exitCode, 0, 'the PTY session\'s exit code');
  log('pty ok');

  // ---- files: text and binary written, read, listed, stat'ed, moved, removed
  const bin = new Uint8Array(256);
  for (let i = 0; i < 256; i++) bin[i] = i;
  await sbx.files.write('/tmp/e2b/a.txt', 'hello file\n');
  const many = await sbx.files.write([{ path: '/tmp/e2b/bin/b.bin', data: bin }, { path: '/tmp/e2b/c.txt', data: 'c' }]);
  assert.equal(many.length, 2, 'a write of two files answers two entries');
  assert.equal(await sbx.files.read('/tmp/e2b/a.txt'), 'hello file\n');
  assert.deepEqual(await sbx.files.read('/tmp/e2b/bin/b.bin', { format: 'bytes' }), bin, 'binary read back');
  const names = (await sbx.files.list('/tmp/e2b')).map((e) => `${e.name}:${e.type}`).sort();
  assert.deepEqual(names, ['a.txt:file', 'bin:dir', 'c.txt:file'], 'files.list');
  const deep = (await sbx.files.list('/tmp/e2b', { depth: 2 })).map((e) => e.path).sort();
  assert.ok(deep.includes('/tmp/e2b/bin/b.bin'), `files.list depth 2: ${deep}`);
  const st = await sbx.files.getInfo('/tmp/e2b/bin/b.bin');
  assert.equal(st.size, 256, 'getInfo size');
  assert.equal(st.type, 'file');
  assert.equal(await sbx.files.exists('/tmp/e2b/nothing'), false, 'exists of a missing file');
  assert.equal(await sbx.files.makeDir('/tmp/e2b/new/deeper'), true, 'makeDir');
  assert.equal(await sbx.files.makeDir('/tmp/e2b/new/deeper'), false, 'makeDir of an existing directory');
  const moved = await sbx.files.rename('/tmp/e2b/c.txt', '/tmp/e2b/new/c2.txt');
  assert.equal(moved.path, '/tmp/e2b/new/c2.txt', 'rename');
  assert.equal(await sbx.files.read('/tmp/e2b/new/c2.txt'), 'c');
  await sbx.files.remove('/tmp/e2b/new');
  assert.equal(await sbx.files.exists('/tmp/e2b/new'), false, 'remove');
  await expectReject(sbx.files.read('/tmp/e2b/missing.txt'), NotFoundError, 'read of a missing file');
  const seen = await sbx.commands.run('cat /tmp/e2b/a.txt; wc -c < /tmp/e2b/bin/b.bin | tr -d " "');
  assert.equal(seen.stdout, 'hello file\n256\n', 'what commands see of the written files');
  log('files ok');

  // ---- a port served by a background command, through getHost
  const route = process.env.E2B_CHECK_ROUTE;
  if (route) {
    await sbx.files.write('/tmp/www/index.html', 'port-ok\n');
    await sbx.commands.run('httpd -f -p 8080 -h /tmp/www', { background: true, timeoutMs: 0 });
    const host = sbx.getHost(8080);
    const key = process.env.E2B_API_KEY;
    const got = await until('the served port', async () => {
      const r = await getViaHost(route, host, { 'X-Access-Token': key });
      return r.status === 200 ? r : null;
    });
    assert.equal(got.body, 'port-ok\n', `GET ${host}`);
    assert.equal((await getViaHost(route, host)).status, 401, 'a port without the key');
    if (process.env.E2B_CHECK_OTHER_KEY) {
      const r = await getViaHost(route, host, { 'X-Access-Token': process.env.E2B_CHECK_OTHER_KEY });
      assert.equal(r.status, 401, 'a port with another tenant\'s key');
    }
    log(`port ok (${host})`);
  }
}

// The SDK on a microVM sandbox (metadata sandbox.isolation: microvm): run by
// tests/integration/test_microvm_driver.sh, whose worker has the driver.
async function microvmChecks() {
  const vm = await Sandbox.create({ metadata: { 'sandbox.isolation': 'microvm' }, timeoutMs: 300_000 });
  created.push(vm);
  const info = await vm.getInfo();
  assert.equal(info.metadata['sandbox.isolation'], 'microvm');
  const r = await vm.commands.run('echo in-vm; uname -r; exit 0');
  assert.equal(r.stdout.split('\n')[0], 'in-vm', 'a command in the microVM');
  const failed = await expectReject(vm.commands.run('exit 4'), CommandExitError, 'a failing command in the microVM');
  assert.equal(failed.exitCode, 4);
  let early = '';
  const bg = await vm.commands.run('echo vm-started; sleep 60', { background: true, timeoutMs: 0, onStdout: (d) => { early += d; } });
  await until('the microVM command\'s first line', () => early.includes('vm-started\n'), 60_000);
  assert.equal(await bg.kill(), true, 'kill in the microVM');
  await expectReject(bg.wait(), CommandExitError, 'wait of a killed command in the microVM');
  // the driver's shells are terminals only: stdin without a pty is refused
  // with its reason (docs/e2b.md); on a PTY it goes
  const noStdin = await expectReject(vm.commands.run('cat', { background: true, stdin: true }), Error,
    'stdin without a terminal in the microVM');
  assert.match(noStdin.message, /without a terminal/);
  let screen = '';
  const dec = new TextDecoder();
  const pty = await vm.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: (d) => { screen += dec.decode(d, { stream: true }); } });
  await vm.pty.sendInput(pty.pid, new TextEncoder().encode('echo vm-$((6*7))\n'));
  await until('the microVM terminal', () => screen.includes('vm-42'), 60_000);
  await vm.pty.sendInput(pty.pid, new TextEncoder().encode('exit 0\n'));
  assert.equal((await pty.wait()).exitCode, 0, 'the microVM PTY session');
  await vm.files.write('/root/vm.txt', 'vm file\n');
  assert.equal(await vm.files.read('/root/vm.txt'), 'vm file\n');
  assert.equal((await vm.commands.run('cat /root/vm.txt')).stdout, 'vm file\n');
  assert.equal(await vm.kill(), true);
  log('microvm ok');
}

async function main() {
  if (want('microvm') && !parts.has('all')) {
    await microvmChecks();
    log('all ok');
    return;
  }
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
    // ---- the SDK's own errors: a cwd that does not exist, a command past its timeoutMs
    await expectReject(sbx.commands.run('true', { cwd: '/no/such/dir' }), InvalidArgumentError, 'a missing cwd');
    const t1 = performance.now();
    await expectReject(sbx.commands.run('sleep 30', { timeoutMs: 1500 }), TimeoutError, 'a command past its timeoutMs');
    assert.ok(performance.now() - t1 < 10_000, 'the timeout ended the command');
    log('errors of commands ok');
  } else {
    log(`timing create_ms=${Math.round(tCreated - t0)} total_ms=${Math.round(tCreated - t0)}`);
  }

  if (want('envd')) await envdChecks(sbx);

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
  // pause and resume (connect) on the other sandbox: its files are kept
  await other.files.write('/tmp/kept.txt', 'kept over a pause');
  assert.equal(await other.pause(), true, 'pause');
  assert.equal((await other.getInfo()).state, 'paused', 'getInfo of a paused sandbox');
  const pausedNow = await Sandbox.list({ query: { metadata: { suite: label }, state: ['paused'] } }).nextItems();
  assert.deepEqual(pausedNow.map((s) => s.sandboxId), [other.sandboxId], 'list state paused');
  assert.equal(await other.pause(), false, 'a second pause (409) answers false');
  const back = await Sandbox.connect(other.sandboxId);
  assert.equal((await back.getInfo()).state, 'running', 'connect resumed it');
  assert.equal(await back.files.read('/tmp/kept.txt'), 'kept over a pause', 'its file after the resume');
  log('pause, connect (resume) ok');
  // snapshots: createSnapshot, a sandbox from its id has the file, list, delete
  const snap = await back.createSnapshot({ name: `snap-${process.pid}` });
  assert.match(snap.snapshotId, /^snp_/, `createSnapshot: ${JSON.stringify(snap)}`);
  assert.deepEqual(snap.names, [`snap-${process.pid}`]);
  const fromSnap = await Sandbox.create(snap.snapshotId, { metadata: { suite: label, role: 'from-snapshot' }, timeoutMs: 120_000 });
  created.push(fromSnap);
  assert.equal(await fromSnap.files.read('/tmp/kept.txt'), 'kept over a pause', 'a sandbox from the snapshot');
  const snaps = await Sandbox.listSnapshots({ sandboxId: other.sandboxId }).nextItems();
  assert.deepEqual(snaps.map((s) => s.snapshotId), [snap.snapshotId], 'listSnapshots of the sandbox');
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true, 'deleteSnapshot');
  assert.equal(await Sandbox.deleteSnapshot('snp_aaaaaaaaaaaaaaaaaaaaaaaaaa'), false, 'deleteSnapshot of none');
  await fromSnap.kill();
  log('createSnapshot, create from it, listSnapshots, deleteSnapshot ok');
  // ---- template builds: Template.build runs on the server, then a sandbox
  // from the template has what the steps made; a failing step is a
  // BuildError naming it; COPY copies the uploaded files
  if (want('template')) {
    const image = process.env.E2B_CHECK_IMAGE || 'sandbox/busybox:latest';
    const name = `e2b-tpl-${process.pid}`;
    const logs = [];
    const tpl = Template().fromImage(image).setEnvs({ GREETING: `hi-${process.pid}` }).setWorkdir('/srv')
      .runCmd('echo "$GREETING" > /srv/greeting').runCmd('pwd > /srv/where; echo "printed-by-$GREETING"');
    const built = await Template.build(tpl, name, { cpuCount: 1, memoryMB: 128, onBuildLogs: (e) => logs.push(String(e)) });
    assert.equal(built.templateId, name, `Template.build's templateId: ${JSON.stringify(built)}`);
    assert.match(built.buildId, /^bld_/, 'its buildId');
    assert.ok(logs.some((l) => /version 1 ready/.test(l)), `the build's log names the version: ${logs.join(' | ')}`);
    assert.ok(logs.some((l) => l.includes(`printed-by-hi-${process.pid}`)), `a step's output is in the build's log: ${logs.join(' | ')}`);
    const status = await Template.getBuildStatus({ templateId: name, buildId: built.buildId });
    assert.equal(status.status, 'ready', 'getBuildStatus of the build');
    const fromTpl = await Sandbox.create(name, { metadata: { suite: label, role: 'from-template' }, timeoutMs: 120_000 });
    created.push(fromTpl);
    if (want('envd')) {
      const r = await fromTpl.commands.run('cat /srv/greeting /srv/where; echo "$GREETING"; pwd');
      assert.equal(r.stdout, `hi-${process.pid}\n/srv\nhi-${process.pid}\n/srv\n`, 'the built files, ENV and WORKDIR');
    }
    await fromTpl.kill();
    const bad = Template().fromImage(image).runCmd('true').runCmd('echo failing >&2; exit 5');
    const e = await expectReject(Template.build(bad, name, { cpuCount: 1, memoryMB: 128 }), BuildError, 'a failing step');
    assert.match(e.message, /step 2 of 2 .* exited with 5/, `the failed build's message: ${e.message}`);
    // COPY: the SDK uploads each source's files (GET then PUT
    // /templates/{id}/files/{hash}), the build copies them in as Docker's
    // COPY does: a file to a path, a directory's contents into one, a
    // relative destination under the WORKDIR, a user and a mode
    const ctx = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-ctx-'));
    fs.writeFileSync(path.join(ctx, 'a.txt'), `file-a-${process.pid}\n`);
    fs.mkdirSync(path.join(ctx, 'dir', 'sub'), { recursive: true });
    fs.writeFileSync(path.join(ctx, 'dir', 'x.txt'), 'in-dir\n');
    fs.writeFileSync(path.join(ctx, 'dir', 'sub', 'y.txt'), 'in-sub\n');
    const withCopy = Template({ fileContextPath: ctx }).fromImage(image).setWorkdir('/app')
      .copy('a.txt', '/etc/a.txt').copy('dir', 'd/').copy('a.txt', 'mode/', { user: 'nobody', mode: 0o600 })
      .runCmd('cat /etc/a.txt d/x.txt d/sub/y.txt > all.txt');
    const clogs = [];
    await Template.build(withCopy, `${name}-copy`, { cpuCount: 1, memoryMB: 128, onBuildLogs: (e) => clogs.push(String(e)) });
    assert.ok(clogs.some((l) => /Uploaded 'dir'/.test(l)), `the SDK uploaded the files: ${clogs.join(' | ')}`);
    const fromCopy = await Sandbox.create(`${name}-copy`, { metadata: { suite: label, role: 'from-copy' }, timeoutMs: 120_000 });
    created.push(fromCopy);
    if (want('envd')) {
      const r = await fromCopy.commands.run('cat all.txt; stat -c "%U %a" mode/a.txt');
      assert.equal(r.stdout, `file-a-${process.pid}\nin-dir\nin-sub\nnobody 600\n`, 'the copied files, their owner and mode');
    }
    await fromCopy.kill();
    // the same files again: the SDK finds them present and uploads nothing
    const again = [];
    await Template.build(withCopy, `${name}-copy`, { cpuCount: 1, memoryMB: 128, onBuildLogs: (e) => again.push(String(e)) });
    assert.ok(again.some((l) => /Skipping upload of 'dir', already cached/.test(l)), `a second build reuses the files: ${again.join(' | ')}`);
    fs.rmSync(ctx, { recursive: true, force: true });
    log('Template.build, create from it, a failing step, COPY of a file and a directory ok');
  }

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

  // ---- the same SDK on a gVisor sandbox (metadata sandbox.isolation)
  if (want('gvisor')) {
    const gv = await Sandbox.create({ metadata: { suite: label, 'sandbox.isolation': 'gvisor' }, timeoutMs: 120_000 });
    created.push(gv);
    const kernel = await gv.commands.run('dmesg | head -n 3');
    assert.match(kernel.stdout, /gVisor/, 'dmesg inside the gVisor sandbox');
    // gVisor's /tmp is its own tmpfs, out of the worker's reach: files go elsewhere
    await gv.files.write('/root/gv.txt', 'in gvisor\n');
    assert.equal((await gv.commands.run('cat /root/gv.txt')).stdout, 'in gvisor\n');
    assert.equal(await gv.files.read('/root/gv.txt'), 'in gvisor\n');
    let out = '';
    const h = await gv.commands.run('echo one; sleep 30', { background: true, timeoutMs: 0, onStdout: (d) => { out += d; } });
    await until('gVisor background output', () => out.includes('one\n'));
    assert.equal(await h.kill(), true);
    assert.equal(await gv.kill(), true);
    log('gvisor ok');
  }

  // ---- kill, and what a missing sandbox raises
  assert.equal(await other.kill(), true, 'kill of a running sandbox');
  assert.equal(await Sandbox.kill(other.sandboxId), false, 'kill of a killed sandbox is false');
  await expectReject(Sandbox.getInfo('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'), SandboxNotFoundError, 'getInfo of a missing sandbox');
  await expectReject(Sandbox.connect('sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa'), NotFoundError, 'connect to a missing sandbox');
  assert.equal(await other.isRunning(), false, 'isRunning of a killed sandbox');
  await expectReject(Sandbox.list({ apiKey: 'sbt_aaaaaaaaaaaaaaaaaaaaaaaaaa_' + 'a'.repeat(43) }).nextItems(),
    AuthenticationError, 'a wrong API key');
  // a controller with a tight request rate (the test's third): past it a
  // 429 whose Retry-After does not fit the request's deadline
  const limited = process.env.E2B_CHECK_LIMITED_URL;
  if (limited) {
    let err = null;
    for (let i = 0; i < 20 && !err; i++) {
      try {
        await Sandbox.list({ apiUrl: limited, requestTimeoutMs: 500 }).nextItems();
      } catch (e) {
        err = e;
      }
    }
    assert.ok(err instanceof RateLimitError, `past the rate: expected RateLimitError, got ${err}`);
  }
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
