// The SDK against a real controller (tests/integration/test_sdk_typescript.sh
// starts it and passes its addresses and tokens). Every check talks to the
// controller: nothing is mocked. Prints "ok - NAME" per check, "FAIL NAME: …"
// and exits 1 on the first failure, "N checks passed" at the end.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { appendFileSync, mkdirSync, readFileSync, readlinkSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";

import * as sdk from "@sandbox/client";
import * as nodeSdk from "@sandbox/client/node";
import * as browserSdk from "@sandbox/client/browser";

const { Client, SandboxError } = sdk;
const env = process.env;
const need = (k) => env[k] || (console.error(`FAIL setup: ${k} is not set`), process.exit(2));
const URL_ = need("SANDBOX_URL");
const ADMIN = need("ADMIN_TOKEN");
const IMAGE = need("IMAGE");
const TLS_URL = need("TLS_URL");
const CA = need("CA_FILE");
const OTHER_CA = need("OTHER_CA_FILE");
const API_MD = need("API_MD");
const TMP = need("TEST_TMP");
const IDS_FILE = need("IDS_FILE");
const TENANT = need("TENANT");

let passed = 0;
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    console.error(`FAIL ${name}: ${e?.stack ?? e}`);
    process.exit(1);
  }
  passed++;
  console.log(`ok - ${name} (${Date.now() - t0} ms)`);
}
/** Runs fn, which must throw an instance of cls; returns the error. */
async function throwsClass(cls, fn, what) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof cls, `${what}: expected ${cls.name}, got ${e?.constructor?.name}: ${e?.message}`);
    assert.ok(e instanceof SandboxError, `${what}: ${cls.name} is a SandboxError`);
    return e;
  }
  assert.fail(`${what}: expected ${cls.name}, nothing was thrown`);
}
const track = (id) => appendFileSync(IDS_FILE, id + "\n");
const secret = (s) => env.ITEST_TMP && appendFileSync(join(env.ITEST_TMP, "secrets.txt"), s + "\n");
const sha = (b) => createHash("sha256").update(b).digest("hex");
const small = { image: IMAGE, memoryMib: 128, cpuMillis: 250 };

// Explicit settings: the checks must not read the runner's own SANDBOX_* or config file.
const noEnv = { HOME: join(TMP, "home") };
const admin = new Client({ url: URL_, token: ADMIN, env: noEnv });

// ------------------------------------------------------------ package shape

await check("entries: the Node condition, ./node and ./browser share one set of classes", async () => {
  assert.equal(sdk.Client, nodeSdk.Client, "plain import in Node is the Node entry");
  assert.notEqual(browserSdk.Client, nodeSdk.Client);
  assert.ok(new nodeSdk.Client({ url: URL_, env: noEnv }) instanceof browserSdk.Client);
  assert.equal(browserSdk.NotFound, nodeSdk.NotFound, "one error class for both entries");
  assert.throws(() => new browserSdk.Client({ url: URL_, caFile: CA }), /Node/);
  assert.throws(() => new browserSdk.Client({ url: "ftp://x" }), /http/);
});

await check("every code of the API's error table maps to its exported class", async () => {
  const md = readFileSync(API_MD, "utf8");
  const codes = new Set([...md.matchAll(/^\| ([a-z_]+) \| (\d{3}) \|/gm)].map((m) => m[1]));
  const opPara = md.slice(md.indexOf("Operation errors (in `operation.error.code`)"));
  for (const m of opPara.slice(0, opPara.indexOf("\n\n")).matchAll(/`([a-z_]+)`/g)) codes.add(m[1]);
  codes.add("bad_gateway"); // the route listener's
  assert.ok(codes.size >= 20, `parsed ${codes.size} codes from api.md`);
  const surface = {
    invalid_argument: "InvalidArgument", invalid_json: "InvalidJson", unauthorized: "Unauthorized",
    forbidden: "Forbidden", not_found: "NotFound", method_not_allowed: "MethodNotAllowed", conflict: "Conflict",
    stale_lease: "StaleLease", payload_too_large: "PayloadTooLarge", policy_denied: "PolicyDenied",
    isolation_unavailable: "IsolationUnavailable", quota_exceeded: "QuotaExceeded", unavailable: "Unavailable",
    internal: "InternalError", image_unavailable: "ImageUnavailable", runtime_error: "SandboxRuntimeError",
    timeout: "OperationTimeout", worker_lost: "WorkerLost", cancelled: "Cancelled", bad_gateway: "BadGateway",
    headers_too_large: "HeadersTooLarge", sandbox_exited: "SandboxExited", rate_limited: "RateLimited",
    request_timeout: "RequestTimeout",
  };
  for (const code of new Set([...codes, ...Object.keys(surface)])) {
    const name = surface[code];
    assert.ok(name, `api.md has code ${code}, which the SDK surface does not name`);
    const cls = sdk[name];
    assert.equal(typeof cls, "function", `${name} is exported`);
    assert.equal(sdk.ERROR_CLASSES[code], cls, `ERROR_CLASSES.${code}`);
    const e = sdk.errorFor({ code, message: "m", status: 400, requestId: "r", retryAfter: 2 });
    assert.ok(e instanceof cls && e instanceof SandboxError && e instanceof Error, code);
    assert.equal(e.name, name);
    assert.deepEqual([e.code, e.message, e.status, e.requestId, e.retryAfter], [code, "m", 400, "r", 2]);
  }
  const unknown = sdk.errorFor({ code: "brand_new", message: "x" });
  assert.equal(unknown.constructor, SandboxError, "an unknown code is a plain SandboxError");
});

// ------------------------------------------------------------ admin: tenant and tokens

let member, memberSecret, tenant2;
await check("admin: tenants create/get/list, tokens create/list", async () => {
  const t = await admin.tenants.create(TENANT);
  assert.equal(t.name, TENANT);
  assert.equal((await admin.tenants.get(TENANT)).name, TENANT);
  assert.ok((await admin.tenants.list()).some((x) => x.name === TENANT));
  const tok = await admin.tokens.create({ tenant: TENANT, role: "member", name: "sdk-ts" });
  assert.match(tok.secret, /^sbt_/);
  secret(tok.secret);
  memberSecret = tok.secret;
  assert.ok((await admin.tokens.list({ tenant: TENANT })).some((x) => x.id === tok.token.id));
  member = new Client({ url: URL_, token: memberSecret, env: noEnv });
  const v = await member.version();
  assert.equal(v.api, "v1");
  const imgs = await member.images();
  assert.ok(Array.isArray(imgs.images));
});

// ------------------------------------------------------------ errors provoked for real

await check("errors: Unauthorized, Forbidden, NotFound, InvalidArgument (code, status, requestId)", async () => {
  const bad = new Client({ url: URL_, token: "sbt_nope", env: noEnv });
  const u = await throwsClass(sdk.Unauthorized, () => bad.version(), "a bad token");
  assert.equal(u.status, 401);
  assert.equal(u.code, "unauthorized");
  assert.ok(u.requestId, "X-Request-Id is kept");
  const f = await throwsClass(sdk.Forbidden, () => member.tokens.list(), "a member listing tokens");
  assert.equal(f.status, 403);
  const n = await throwsClass(sdk.NotFound, () => member.sandboxes.get("no-such-sandbox-name"), "an unknown name");
  assert.equal(n.status, 404);
  await throwsClass(sdk.NotFound, () => member.operations.get("op_00000000000000000000000000"), "an unknown op");
  await throwsClass(sdk.NotFound, () => admin.workers.drain("no-such-worker-sdk"), "drain of no worker");
  await throwsClass(sdk.NotFound, () => admin.workers.resume("no-such-worker-sdk"), "resume of no worker");
  const i = await throwsClass(sdk.InvalidArgument, () => member.sandboxes.create({ ...small, cpuMillis: -1 }), "cpu -1");
  assert.match(i.message, /cpu_millis/);
  assert.equal(i.status, 400);
});

await check("errors: IsolationUnavailable from the create operation (.operation set)", async () => {
  const e = await throwsClass(
    sdk.IsolationUnavailable,
    () => member.sandboxes.create({ ...small, isolation: "microvm", timeout: 60 }),
    "a microvm nobody offers",
  );
  assert.equal(e.code, "isolation_unavailable");
  assert.ok(e.operation?.id?.startsWith("op_"), "the failed operation is attached");
  if (e.operation?.sandbox_id) track(e.operation.sandbox_id);
});

await check("errors: QuotaExceeded and PolicyDenied from a tenant policy", async () => {
  tenant2 = TENANT + "-q";
  await admin.tenants.create(tenant2);
  await admin.tenants.setPolicy(tenant2, { max_cpu_millis: 100 });
  const p = await throwsClass(
    sdk.PolicyDenied,
    () => admin.sandboxes.create({ ...small, cpuMillis: 200, tenant: tenant2 }),
    "cpu over the policy",
  );
  assert.equal(p.status, 422);
  assert.match(p.message, /max_cpu_millis/);
  // a warm pool counts against its tenant's quota as its size: one of 2
  // past max_sandboxes 1 is refused before any sandbox is made
  const pol = await admin.tenants.setPolicy(tenant2, { max_sandboxes: 1 });
  assert.equal(pol.policy.max_sandboxes, 1);
  const q = await throwsClass(
    sdk.QuotaExceeded,
    () => admin.pools.create({ name: "sdkq", size: 2, tenant: tenant2, image: IMAGE, memoryMib: 128, cpuMillis: 100 }),
    "a pool past max_sandboxes",
  );
  assert.equal(q.status, 429);
  assert.match(q.message, /max_sandboxes/);
  const gone = await admin.tenants.delete(tenant2);
  assert.equal(gone.deleted, true);
  await throwsClass(sdk.NotFound, () => admin.tenants.get(tenant2), "a deleted tenant");
});

// ------------------------------------------------------------ the main sandbox

let sbx;
await check("sandboxes.create (restricted, untrusted) waits until running; get by name; list", async () => {
  sbx = await member.sandboxes.create({
    ...small,
    name: "sdk-main",
    network: "restricted",
    trust: { untrustedRepo: true, generatedCode: true },
    labels: { suite: "sdk-ts" },
    ttlSeconds: 900,
  });
  track(sbx.id);
  assert.match(sbx.id, /^sbx_/);
  assert.equal(sbx.phase, "running");
  assert.equal(sbx.name, "sdk-main");
  assert.equal(sbx.data.trust.untrusted_repo, true);
  assert.equal(sbx.data.network, "restricted");
  const again = await member.sandboxes.get("sdk-main");
  assert.equal(again.id, sbx.id);
  const listed = await member.sandboxes.list({ labels: { suite: "sdk-ts" }, phase: ["running"] }).toArray();
  assert.deepEqual(listed.map((s) => s.id), [sbx.id]);
  const c = await throwsClass(sdk.Conflict, () => member.sandboxes.create({ ...small, name: "sdk-main" }), "name in use");
  assert.equal(c.status, 409);
});

await check("list iterates every page (limit 1)", async () => {
  const op = await member.sandboxes.create({ ...small, name: "sdk-page", wait: false });
  track(op.sandboxId);
  const ids = [];
  for await (const s of member.sandboxes.list({ limit: 1 })) ids.push(s.id);
  assert.ok(ids.includes(sbx.id) && ids.includes(op.sandboxId), `both pages: ${ids}`);
  assert.equal(new Set(ids).size, ids.length, "no sandbox twice");
  const d = await (await member.sandboxes.get("sdk-page")).delete();
  assert.equal(d.state, "succeeded");
});

await check("exec: ExecResult with exit code, text and binary output, stdin, env, cwd", async () => {
  const r = await sbx.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]);
  assert.equal(r.exitCode, 3);
  assert.equal(r.stdoutText, "out\n");
  assert.equal(r.stderrText, "err\n");
  assert.ok(!r.ok && !r.timedOut && r.durationMs >= 0);
  const b = await sbx.exec(["sh", "-c", "printf 'a\\000b\\377'"]);
  assert.deepEqual([...b.stdout], [0x61, 0, 0x62, 0xff], "bytes from stdout_b64");
  const s = await sbx.exec(["sh", "-c", "cat; echo \"$K\"; pwd"], { stdin: "in-text\n", env: { K: "vee" }, cwd: "/tmp" });
  assert.equal(s.stdoutText, "in-text\nvee\n/tmp\n");
  const sb = await sbx.exec(["sh", "-c", "wc -c"], { stdin: new Uint8Array([0, 1, 2, 255]) });
  assert.equal(sb.stdoutText.trim(), "4");
  const t = await sbx.exec(["yes"], { maxOutputBytes: 1000, timeout: 1 });
  assert.ok(t.timedOut && t.stdoutTruncated && t.stdout.length <= 1000, "bounded and timed out");
});

await check("exec stream: chunks arrive before the command ends; result afterwards", async () => {
  const st = await sbx.exec(["sh", "-c", "echo first; sleep 2; echo second >&2; exit 4"], { stream: true });
  const seen = [];
  let firstAt;
  for await (const c of st) {
    firstAt ??= Date.now();
    seen.push([c.stream, c.text, c.offset]);
  }
  const end = Date.now();
  assert.ok(end - firstAt >= 1500, `the first chunk came ${end - firstAt} ms before the end (expected >= 1500)`);
  assert.deepEqual(seen, [["stdout", "first\n", 0], ["stderr", "second\n", 6]]);
  assert.equal(st.result.exitCode, 4);
  assert.equal(st.result.stderrText, "second\n");
});

await check("execDetached followed, then cancelled: wait() throws Cancelled", async () => {
  const op = await sbx.execDetached(["sh", "-c", "echo begin; sleep 300"]);
  assert.equal(op.kind, "exec");
  const out = op.output();
  let text = "";
  for await (const c of out) {
    text += c.text;
    if (text.includes("begin")) break;
  }
  assert.equal(text, "begin\n");
  await op.cancel();
  const e = await throwsClass(sdk.Cancelled, () => op.wait({ timeout: 30 }), "wait of a cancelled exec");
  assert.equal(e.operation.id, op.id);
  assert.equal(op.state, "cancelled");
  // what it wrote stays readable, without follow
  const chunks = [];
  for await (const c of op.output({ follow: false })) chunks.push(c.text);
  assert.equal(chunks.join(""), "begin\n");
  const e2 = await throwsClass(sdk.Conflict, () => member.operations.cancel(op.id), "cancel of a cancelled exec");
  assert.match(e2.message, /cancel/);
  const got = await member.operations.get(op.id);
  assert.equal(got.state, "cancelled");
  await throwsClass(sdk.Cancelled, () => member.operations.wait(op.id), "operations.wait of it");
});

await check("AbortSignal ends a long-poll at once (operation wait, exec, events follow)", async () => {
  const op = await sbx.execDetached(["sleep", "60"]);
  let t0 = Date.now();
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 300);
  await assert.rejects(op.wait({ signal: ac.signal }), (e) => e.name === "AbortError");
  assert.ok(Date.now() - t0 < 3000, `aborted after ${Date.now() - t0} ms`);
  await op.cancel();
  // exec with a signal: aborting also cancels the command in the sandbox
  const ac2 = new AbortController();
  setTimeout(() => ac2.abort(), 500);
  t0 = Date.now();
  await assert.rejects(sbx.exec(["sleep", "61"], { signal: ac2.signal }), (e) => e.name === "AbortError");
  assert.ok(Date.now() - t0 < 3000);
  const ac3 = new AbortController();
  setTimeout(() => ac3.abort(new Error("enough")), 300);
  const evs = member.events({ after: 1e12, follow: true, wait: 30, signal: ac3.signal });
  t0 = Date.now();
  await assert.rejects(
    (async () => {
      for await (const _ of evs) void _;
    })(),
    /enough/,
  );
  assert.ok(Date.now() - t0 < 3000);
  // the worker hears of a cancel in its next heartbeat answer (seconds)
  let ps;
  for (let i = 0; i < 30; i++) {
    ps = await sbx.exec(["ps"]);
    if (!ps.stdoutText.includes("sleep 61")) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  assert.ok(!ps.stdoutText.includes("sleep 61"), "the aborted exec was cancelled in the sandbox");
});

await check("files: write/read/stat/list (text, parents, mode)", async () => {
  const w = await sbx.files.write("/tmp/a/b/hello.txt", "hello\n", { parents: true, mode: 0o600 });
  assert.equal(w.bytes, 6);
  assert.equal(new TextDecoder().decode(await sbx.files.read("/tmp/a/b/hello.txt")), "hello\n");
  const st = await sbx.files.stat("/tmp/a/b/hello.txt");
  assert.equal(st.type, "file");
  assert.equal(st.size, 6);
  assert.equal(st.mode, 0o600);
  const ls = await sbx.files.list("/tmp/a/b");
  assert.deepEqual(ls.map((e) => e.name), ["hello.txt"]);
  await throwsClass(sdk.NotFound, () => sbx.files.stat("/tmp/none"), "stat of a missing path");
  await sbx.files.write("/tmp/blob.txt", new Blob(["from a blob"]));
  assert.equal((await sbx.exec(["cat", "/tmp/blob.txt"])).stdoutText, "from a blob");
  const rs = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode("str")); c.enqueue(new TextEncoder().encode("eam")); c.close(); } });
  await sbx.files.write("/tmp/stream.txt", rs, { size: 6 });
  assert.equal((await sbx.exec(["cat", "/tmp/stream.txt"])).stdoutText, "stream");
});

await check("files: a 50 MiB binary round trip keeps its sha256", async () => {
  const data = randomBytes(50 * 1024 * 1024);
  const want = sha(data);
  await sbx.files.write("/tmp/big.bin", new Uint8Array(data.buffer, data.byteOffset, data.length));
  const inside = await sbx.exec(["sha256sum", "/tmp/big.bin"]);
  assert.equal(inside.stdoutText.split(" ")[0], want, "sha256 in the sandbox");
  const stream = await sbx.files.read("/tmp/big.bin", { stream: true });
  const h = createHash("sha256");
  let n = 0;
  for await (const chunk of stream) {
    h.update(chunk);
    n += chunk.length;
  }
  assert.equal(n, data.length);
  assert.equal(h.digest("hex"), want, "sha256 of the streamed read");
  await sbx.exec(["rm", "/tmp/big.bin"]);
});

// a local tree: nested directories, an executable, a symlink, a name over 100 bytes (PAX)
const tree = join(TMP, "tree");
const longName = "n".repeat(120) + ".txt";
mkdirSync(join(tree, "src/deep"), { recursive: true });
writeFileSync(join(tree, "README"), "readme\n");
writeFileSync(join(tree, "src/deep", longName), "long\n");
writeFileSync(join(tree, "run.sh"), "#!/bin/sh\necho ran\n", { mode: 0o755 });
writeFileSync(join(tree, "src/bin.dat"), randomBytes(70000));
symlinkSync("../README", join(tree, "src/link"));

await check("upload(dir) and download(path) of a directory tree (tar streams)", async () => {
  const up = await sbx.upload(tree, "/work/proj"); // /work is made too
  assert.ok(up.bytes > 70000);
  const r = await sbx.exec(["sh", "-c", `cd /work/proj && ./run.sh && cat src/deep/${longName} && readlink src/link && cat src/link`]);
  assert.equal(r.stdoutText, "ran\nlong\n../README\nreadme\n");
  const out = join(TMP, "down");
  await sbx.download("/work/proj", out);
  const got = join(out, "proj");
  assert.equal(readFileSync(join(got, "README"), "utf8"), "readme\n");
  assert.equal(readFileSync(join(got, "src/deep", longName), "utf8"), "long\n");
  assert.equal(sha(readFileSync(join(got, "src/bin.dat"))), sha(readFileSync(join(tree, "src/bin.dat"))));
  assert.equal(statSync(join(got, "run.sh")).mode & 0o777, 0o755);
  assert.equal(readlinkSync(join(got, "src/link")), "../README");
  // into an existing directory: its contents land there
  await sbx.upload(join(tree, "src/deep"), "/work/proj");
  assert.equal((await sbx.exec(["cat", `/work/proj/${longName}`])).stdoutText, "long\n");
});

function tarOf(members) {
  // members: [name, typeflag, content?, linkname?]
  const blocks = [];
  for (const [name, type, content = "", linkname = ""] of members) {
    const h = Buffer.alloc(512);
    h.write(name, 0);
    h.write("0000644\0", 100);
    h.write("0000000\0", 108);
    h.write("0000000\0", 116);
    h.write(content.length.toString(8).padStart(11, "0") + "\0", 124);
    h.write("00000000000\0", 136);
    h.fill(" ", 148, 156);
    h.write(type, 156);
    h.write(linkname, 157);
    h.write("ustar\u000000", 257);
    let sum = 0;
    for (const b of h) sum += b;
    h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
    blocks.push(h);
    if (content) blocks.push(Buffer.concat([Buffer.from(content)], Math.ceil(content.length / 512) * 512));
  }
  blocks.push(Buffer.alloc(1024));
  const all = Buffer.concat(blocks);
  return new ReadableStream({ start(c) { c.enqueue(new Uint8Array(all)); c.close(); } });
}

await check("the tar reader refuses .., absolute names, devices and writes through no symlink", async () => {
  const dest = join(TMP, "unsafe");
  const cases = [
    [[["../evil", "0", "x"]], /'\.\.'/],
    [[["a/../../evil", "0", "x"]], /'\.\.'/],
    [[["/etc/evil", "0", "x"]], /absolute/],
    [[["dev", "3"]], /device/],
    [[["fifo", "6"]], /FIFO/],
    [[["l", "2", "", "/etc"], ["l/passwd", "0", "x"]], /symlink/],
    [[["h", "1", "", "/etc/passwd"]], /absolute|did not write/],
  ];
  for (const [members, re] of cases) {
    await assert.rejects(nodeSdk.unpackInto(tarOf(members), dest), (e) => e instanceof nodeSdk.TarError && re.test(e.message));
  }
  await nodeSdk.unpackInto(tarOf([["ok/file", "0", "fine"]]), dest);
  assert.equal(readFileSync(join(dest, "ok/file"), "utf8"), "fine");
});

await check("logs: the main process's output (NDJSON), and follow", async () => {
  await sbx.exec(["sh", "-c", "echo logs-line-one >/proc/1/fd/1"]);
  const lines = [];
  for await (const l of sbx.logs()) lines.push(l);
  assert.ok(lines.some((l) => l.stream === "stdout" && l.data.includes("logs-line-one")), JSON.stringify(lines));
  const ac = new AbortController();
  const seen = [];
  const follower = (async () => {
    for await (const l of sbx.logs({ follow: true, tail: 0, signal: ac.signal })) {
      seen.push(l.data);
      if (seen.join("").includes("logs-line-two")) return;
    }
  })();
  await new Promise((r) => setTimeout(r, 500));
  await sbx.exec(["sh", "-c", "echo logs-line-two >/proc/1/fd/1"]);
  const timer = setTimeout(() => ac.abort(), 15000);
  await follower;
  clearTimeout(timer);
  assert.ok(seen.join("").includes("logs-line-two"));
  assert.ok(!seen.join("").includes("logs-line-one"), "tail 0 starts with new output");
});

await check("share(port) with a token route, routes(), unshare()", async () => {
  await sbx.exec(["sh", "-c", "mkdir -p /tmp/www && echo hello-route >/tmp/www/index.html && httpd -p 8080 -h /tmp/www"]);
  const route = await sbx.share(8080, { ttlSeconds: 600 });
  assert.match(route.id, /^rt_/);
  assert.ok(route.accessToken, "the access token of a token route");
  assert.equal(route.port, 8080);
  let body = "";
  for (let i = 0; i < 20 && body !== "hello-route\n"; i++) {
    const r = await fetch(route.url, { headers: { "X-Sandbox-Route-Token": route.accessToken } });
    body = await r.text();
    if (body !== "hello-route\n") await new Promise((res) => setTimeout(res, 250));
  }
  assert.equal(body, "hello-route\n");
  const denied = await fetch(route.url);
  assert.equal(denied.status, 401);
  assert.ok((await sbx.routes()).some((r) => r.id === route.id && r.state === "active"));
  const op = await sbx.unshare(route.id);
  assert.equal(op.state, "succeeded");
  assert.ok(!(await sbx.routes()).some((r) => r.id === route.id && r.state === "active"));
  assert.ok((await sbx.routes({ all: true })).some((r) => r.id === route.id && r.state === "removed"));
});

let cursor;
await check("extend(ttl) (and PolicyDenied over the server's ceiling); events with the cursor", async () => {
  const op = await sbx.extend(1200);
  assert.equal(op.kind, "extend");
  assert.equal(op.state, "succeeded");
  assert.ok(op.result.expires_at);
  assert.equal(sbx.data.expires_at, op.result.expires_at);
  await throwsClass(sdk.PolicyDenied, () => sbx.extend(2_592_000), "extend past max_ttl_seconds");
  const evs = member.events({ sandbox: sbx.id });
  const kinds = [];
  for await (const ev of evs) kinds.push(ev.kind);
  assert.ok(kinds.includes("sandbox.running") && kinds.includes("sandbox.extended"), kinds.join(","));
  assert.ok(evs.cursor > 0);
  cursor = evs.cursor;
  // nothing new after the cursor, then exactly the next event once it happens
  const none = [];
  for await (const ev of member.events({ sandbox: sbx.id, after: cursor })) none.push(ev);
  assert.deepEqual(none, []);
  const follow = member.events({ sandbox: sbx.id, after: cursor, follow: true, wait: 20, kind: "sandbox.extended" });
  const next = (async () => {
    for await (const ev of follow) return ev;
  })();
  await new Promise((r) => setTimeout(r, 300));
  await sbx.extend(1300);
  const ev = await next;
  assert.equal(ev.kind, "sandbox.extended");
  assert.ok(ev.id > cursor);
  assert.equal(follow.cursor, ev.id, "the cursor moved to the event handed out");
});

// ------------------------------------------------------------ snapshots

await check("snapshot({name}) waits until ready; create({from}) has its files; snapshots list/get/delete", async () => {
  const name = "sdk-snap-" + randomBytes(4).toString("hex");
  await sbx.exec(["sh", "-c", `mkdir -p /work && echo ${name} >/work/snap-state`]);
  const snap = await sbx.snapshot({ name, timeout: 120 });
  let child;
  let deleted = false;
  try {
    assert.match(snap.id, /^snp_/);
    assert.equal(snap.name, name);
    assert.equal(snap.sandbox_id, sbx.id);
    assert.equal(snap.state, "ready");
    assert.ok(snap.size_bytes > 0, `size_bytes ${snap.size_bytes}`);
    // no image: the snapshot's is used
    child = await member.sandboxes.create({ from: name, memoryMib: 128, cpuMillis: 250, labels: { suite: "sdk-ts-snap" } });
    track(child.id);
    assert.equal(child.from, snap.id);
    assert.equal(child.data.from, snap.id);
    const r = await child.exec(["cat", "/work/snap-state"]);
    assert.equal(r.stdoutText, name + "\n", "the file the snapshot kept");
    assert.ok((await member.snapshots.list()).some((x) => x.id === snap.id), "snapshots.list has it");
    assert.deepEqual((await member.snapshots.list({ sandbox: sbx.id })).map((x) => x.id), [snap.id]);
    assert.equal((await member.snapshots.get(name)).id, snap.id, "snapshots.get by name");
    await child.delete();
    const gone = await member.snapshots.delete(snap.id);
    deleted = true;
    assert.equal(gone.id, snap.id);
    assert.equal(gone.state, "deleted");
    assert.ok(!(await member.snapshots.list()).some((x) => x.id === snap.id), "a deleted snapshot leaves the list");
  } finally {
    if (!deleted) {
      if (child) await child.delete({ wait: false }).catch(() => undefined);
      await member.snapshots.delete(snap.id).catch(() => undefined);
    }
  }
});

// ------------------------------------------------------------ volumes

await check("volumes.create; create({volumes}) writes, a read-only mount reads; Conflict while mounted; list/get/delete", async () => {
  const name = "sdk-vol-" + randomBytes(4).toString("hex");
  const vol = await member.volumes.create({ name, sizeMib: 16 });
  const made = [];
  let deleted = false;
  try {
    assert.match(vol.id, /^vol_/);
    assert.equal(vol.state, "unplaced");
    assert.equal(vol.size_mib, 16);
    const mount = async (readOnly) => {
      const s = await member.sandboxes.create({ ...small, volumes: [{ volume: name, path: "/data", readOnly }] });
      track(s.id);
      made.push(s);
      assert.deepEqual(s.volumes.map((m) => [m.volume, m.read_only]), [[vol.id, readOnly]]);
      return s;
    };
    const a = await mount(false);
    assert.equal((await a.exec(["sh", "-c", `echo ${name} > /data/note && sync`])).exitCode, 0);
    const got = await member.volumes.get(name);
    assert.equal(got.state, "ready");
    assert.deepEqual(got.mounted_by.map((m) => m.sandbox), [a.id]);
    await throwsClass(sdk.Conflict, () => member.volumes.delete(name), "deleting a mounted volume");
    await a.delete();
    const b = await mount(true);
    assert.equal((await b.exec(["cat", "/data/note"])).stdoutText, name + "\n", "read through a read-only mount");
    await b.delete();
    assert.ok((await member.volumes.list()).some((v) => v.id === vol.id), "volumes.list has it");
    const gone = await member.volumes.delete(vol.id);
    deleted = true;
    assert.equal(gone.state, "deleted");
    assert.ok(!(await member.volumes.list()).some((v) => v.id === vol.id), "a deleted volume leaves the list");
  } finally {
    if (!deleted) {
      for (const s of made) await s.delete().catch(() => undefined);
      await member.volumes.delete(vol.id).catch(() => undefined);
    }
  }
});

// ------------------------------------------------------------ idempotent retries

await check("a create whose answer is lost is retried with the same Idempotency-Key: one sandbox", async () => {
  const upstream = new URL(URL_);
  const posts = [];
  let dropped = false;
  const proxy = http.createServer((req, res) => {
    const body = [];
    req.on("data", (d) => body.push(d));
    req.on("end", () => {
      const up = http.request(
        { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers },
        (ures) => {
          const rb = [];
          ures.on("data", (d) => rb.push(d));
          ures.on("end", () => {
            if (req.method === "POST" && req.url === "/v1/sandboxes") {
              posts.push(req.headers["idempotency-key"]);
              if (!dropped) {
                // the controller made the sandbox; its answer never arrives
                dropped = true;
                req.socket.destroy();
                return;
              }
            }
            res.writeHead(ures.statusCode, ures.headers);
            res.end(Buffer.concat(rb));
          });
        },
      );
      up.on("error", () => req.socket.destroy());
      up.end(Buffer.concat(body));
    });
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  try {
    const via = new Client({ url: `http://127.0.0.1:${proxy.address().port}`, token: memberSecret, env: noEnv });
    const label = "r" + randomBytes(4).toString("hex");
    const made = await via.sandboxes.create({ ...small, labels: { sdkretry: label } });
    track(made.id);
    assert.equal(posts.length, 2, "the create was sent twice");
    assert.ok(posts[0] && posts[0] === posts[1], "with one Idempotency-Key");
    const found = await member.sandboxes.list({ labels: { sdkretry: label } }).toArray();
    assert.deepEqual(found.map((s) => s.id), [made.id], "exactly one sandbox, the one returned");
    const d = await made.delete();
    assert.equal(d.kind, "delete");
    // retries: 0 does not retry: the lost answer is the caller's error
    dropped = false;
    const once = new Client({ url: `http://127.0.0.1:${proxy.address().port}`, token: memberSecret, retries: 0, env: noEnv });
    await throwsClass(sdk.SandboxConnectionError, () => once.sandboxes.create({ ...small, labels: { sdkretry: label + "x" } }), "retries 0");
    for (const s of await member.sandboxes.list({ labels: { sdkretry: label + "x" } }).toArray()) {
      track(s.id);
      await s.delete({ wait: false });
    }
  } finally {
    proxy.close();
  }
});

// ------------------------------------------------------------ TLS with a private CA, rate limits

await check("TLS: caFile (node:https transport), SANDBOX_CA_FILE, the config file's context; no CA fails", async () => {
  const tls = new Client({ url: TLS_URL, token: memberSecret, caFile: CA, env: noEnv });
  assert.equal(tls.caFile, CA);
  assert.equal((await tls.version()).api, "v1");
  const s = await tls.sandboxes.get(sbx.id);
  assert.equal((await s.exec(["echo", "over tls"])).stdoutText, "over tls\n");
  const bytes = randomBytes(300000);
  await s.files.write("/tmp/tls.bin", new Uint8Array(bytes));
  assert.equal(sha(await s.files.read("/tmp/tls.bin")), sha(bytes));
  await s.upload(tree, "/work/tls-proj"); // a chunked tar stream through node:https
  assert.equal((await s.exec(["cat", "/work/tls-proj/README"])).stdoutText, "readme\n");
  const out = join(TMP, "tls-down");
  await s.download("/work/tls-proj/src", out);
  assert.equal(readlinkSync(join(out, "src/link")), "../README");
  // settings from the environment
  const fromEnv = new Client({ env: { HOME: noEnv.HOME, SANDBOX_URL: TLS_URL, SANDBOX_TOKEN: memberSecret, SANDBOX_CA_FILE: CA } });
  assert.equal(fromEnv.url, TLS_URL);
  assert.equal((await fromEnv.version()).api, "v1");
  // and from the CLI's config file, its current context
  const xdg = join(TMP, "xdg");
  mkdirSync(join(xdg, "sandbox"), { recursive: true });
  writeFileSync(
    join(xdg, "sandbox/config"),
    `# written by the SDK test\ncontext = tls\nurl = ${URL_}\n\n[context tls]\nurl = ${TLS_URL}\ntoken = "${memberSecret}"\nca_file = ${CA}\n`,
    { mode: 0o600 },
  );
  const fromFile = new Client({ env: { XDG_CONFIG_HOME: xdg, HOME: noEnv.HOME } });
  assert.equal(fromFile.context, "tls");
  assert.equal(fromFile.url, TLS_URL);
  assert.equal((await fromFile.sandboxes.get(sbx.id)).id, sbx.id);
  // SANDBOX_URL set: the file's default context is not used (its token stays with its URL)
  const envWins = new Client({ env: { XDG_CONFIG_HOME: xdg, HOME: noEnv.HOME, SANDBOX_URL: URL_ } });
  assert.equal(envWins.url, URL_);
  assert.equal(envWins.context, undefined);
  assert.throws(() => new Client({ env: { XDG_CONFIG_HOME: xdg, SANDBOX_CONTEXT: "nope" } }), /no context 'nope'.*it has tls/);
  // without the CA, or with another CA: the certificate is refused
  for (const ca of [undefined, OTHER_CA]) {
    const c = new Client({ url: TLS_URL, token: memberSecret, caFile: ca, retries: 0, env: noEnv });
    const e = await throwsClass(sdk.SandboxConnectionError, () => c.version(), `TLS with CA ${ca}`);
    assert.match(e.message, /certificate|self.signed|issuer/i);
  }
});

await check("RateLimited with retryAfter; a retried GET honours Retry-After", async () => {
  const tok = await admin.tokens.create({ tenant: TENANT, role: "member", name: "sdk-rate" });
  secret(tok.secret);
  const flood = new Client({ url: TLS_URL, token: tok.secret, caFile: CA, retries: 0, env: noEnv });
  // the TLS controller allows 1 request a second, bursts of 25
  const results = await Promise.allSettled(Array.from({ length: 30 }, () => flood.version()));
  const limited = results.filter((r) => r.status === "rejected").map((r) => r.reason);
  assert.ok(limited.length > 0, "some of 30 requests at once were refused");
  for (const e of limited) {
    assert.ok(e instanceof sdk.RateLimited, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.status, 429);
    assert.ok(e.retryAfter >= 1, `retryAfter ${e.retryAfter}`);
  }
  // empty the bucket again (held answers let it refill), then ask at once
  for (let i = 0; i < 10; i++) {
    const r = await flood.version().catch((e) => e);
    if (r instanceof sdk.RateLimited) break;
  }
  let attempts = 0;
  const counting = nodeSdk.caFetch(CA);
  const patient = new Client({
    url: TLS_URL,
    token: tok.secret,
    env: noEnv,
    fetch: (u, i) => (attempts++, counting(u, i)),
  });
  const t0 = Date.now();
  assert.equal((await patient.version()).api, "v1");
  const took = Date.now() - t0;
  assert.ok(attempts >= 2, `the GET was retried (${attempts} attempts)`);
  assert.ok(took >= 1000, `it waited out Retry-After (${took} ms)`);
  await admin.tokens.revoke(tok.token.id);
  // every controller thread forgets the token by a NOTIFY, within moments
  // (a lookup it verified a moment ago may still answer once)
  for (let i = 0; i < 20; i++) {
    const r = await patient.version().catch((e) => e);
    if (r instanceof sdk.Unauthorized) break;
    await new Promise((res) => setTimeout(res, 250));
  }
  await throwsClass(sdk.Unauthorized, () => patient.version(), "a revoked token");
});

// ------------------------------------------------------------ admin: pools, workers

await check("admin: pools create/get/list/delete, workers list, Forbidden pool for a member", async () => {
  const name = "sdkp" + randomBytes(3).toString("hex");
  await throwsClass(sdk.Forbidden, () => member.pools.create({ name, size: 1, image: IMAGE }), "a member without max_pool_size");
  const p = await admin.pools.create({ name, size: 1, tenant: TENANT, image: IMAGE, memoryMib: 128, cpuMillis: 100 });
  assert.equal(p.name, name);
  assert.equal((await admin.pools.get(name)).size, 1);
  assert.ok((await admin.pools.list()).some((x) => x.name === name));
  const d = await admin.pools.delete(name);
  assert.equal(typeof d.deleted_members, "number");
  await throwsClass(sdk.NotFound, () => admin.pools.get(name), "a deleted pool");
  const ws = await admin.workers.list();
  assert.ok(ws.length >= 1 && ws.every((w) => w.name && w.state));
});

await check("delete(): the sandbox ends deleted; then NotFound by name", async () => {
  const op = await sbx.delete();
  assert.equal(op.state, "succeeded");
  await sbx.refresh();
  assert.equal(sbx.phase, "deleted");
  await throwsClass(sdk.NotFound, () => member.sandboxes.get("sdk-main"), "a deleted sandbox's name");
  await throwsClass(sdk.Conflict, () => sbx.exec(["true"]), "exec on a deleted sandbox");
});

console.log(`${passed} checks passed`);
