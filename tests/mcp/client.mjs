// Checks sandbox-mcp against its contract (docs/mcp.md) twice over: as an MCP
// client would use it, through the official TypeScript SDK (Client +
// StdioClientTransport), and as raw JSON-RPC lines on the process's stdio.
//
// Env: SANDBOX_MCP     path of the sandbox-mcp binary (required)
//      SANDBOX_URL     controller URL (required)
//      SANDBOX_TOKEN   a member token of a tenant of the test's own (required)
//      MCP_TEST_IMAGE  image to run (default sandbox/busybox:latest)
// Prints one line per check ("ok   NAME (MS ms)" or "FAIL NAME: WHY") and
// exits 1 at the first failure, after deleting the sandboxes it created.

import { spawn } from 'node:child_process';
import { accessSync, constants as fsc, mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import Ajv from 'ajv';
import Ajv2019 from 'ajv/dist/2019.js';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const MCP = process.env.SANDBOX_MCP;
const URL = process.env.SANDBOX_URL;
const TOKEN = process.env.SANDBOX_TOKEN;
const IMAGE = process.env.MCP_TEST_IMAGE || 'sandbox/busybox:latest';

const LATEST = '2025-11-25';
const TOOLS = {
  sandbox_create: {
    // image is optional: the server fills in its default_image
    required: [],
    optional: ['image'],
    properties: ['name', 'image', 'from', 'template', 'auto_pause', 'tenant', 'cpu_millis', 'memory_mib', 'ttl_seconds',
      'network', 'untrusted_repo', 'generated_code', 'hostile', 'isolation', 'read_only_root', 'hardened', 'env',
      'labels', 'selector', 'volumes', 'idempotency_key', 'wait', 'timeout_seconds'],
  },
  sandbox_wait: { required: ['operation_id'], properties: ['operation_id', 'timeout_seconds'], readOnly: true },
  sandbox_exec: {
    required: ['sandbox_id', 'argv'],
    properties: ['sandbox_id', 'argv', 'timeout_seconds', 'env', 'cwd', 'max_output_bytes', 'stdin', 'stdin_b64',
      'detach'],
  },
  sandbox_get: { required: ['sandbox_id'], properties: ['sandbox_id'], readOnly: true },
  sandbox_write_file: {
    required: ['sandbox_id', 'path'],
    properties: ['sandbox_id', 'path', 'content', 'content_base64', 'mode', 'make_dirs'],
    destructive: true,
  },
  sandbox_read_file: { required: ['sandbox_id', 'path'], properties: ['sandbox_id', 'path', 'max_bytes'], readOnly: true },
  sandbox_list_files: { required: ['sandbox_id', 'path'], properties: ['sandbox_id', 'path'], readOnly: true },
  sandbox_list: { required: [], properties: ['tenant', 'all', 'limit', 'labels', 'phase'], readOnly: true },
  sandbox_pools: { required: [], properties: [], readOnly: true },
  sandbox_list_images: { required: [], properties: ['tenant'], readOnly: true },
  sandbox_delete: {
    required: ['sandbox_id'],
    properties: ['sandbox_id', 'wait', 'timeout_seconds', 'idempotency_key'],
    destructive: true,
  },
  operation_get: { required: ['operation_id'], properties: ['operation_id'], readOnly: true },
  sandbox_exec_output: { required: ['operation_id'], properties: ['operation_id', 'offset', 'wait_seconds'], readOnly: true },
  sandbox_cancel: { required: ['operation_id'], properties: ['operation_id'], destructive: true },
  sandbox_share: {
    required: ['sandbox_id', 'port'],
    properties: ['sandbox_id', 'port', 'ttl_seconds', 'auth', 'idempotency_key', 'wait', 'timeout_seconds'],
  },
  sandbox_routes: { required: ['sandbox_id'], properties: ['sandbox_id', 'all'], readOnly: true },
  sandbox_unshare: {
    required: ['sandbox_id', 'route_id'],
    properties: ['sandbox_id', 'route_id', 'wait', 'timeout_seconds'],
    destructive: true,
  },
  sandbox_events: {
    required: [],
    properties: ['sandbox_id', 'operation_id', 'kind', 'after', 'wait', 'limit'],
    readOnly: true,
  },
  sandbox_logs: { required: ['sandbox_id'], properties: ['sandbox_id', 'tail'], readOnly: true },
  sandbox_extend: { required: ['sandbox_id', 'ttl_seconds'], properties: ['sandbox_id', 'ttl_seconds', 'idempotency_key'] },
  sandbox_pause: { required: ['sandbox_id'], properties: ['sandbox_id', 'wait'], destructive: true },
  sandbox_resume: { required: ['sandbox_id'], properties: ['sandbox_id', 'wait'] },
  sandbox_network: { required: ['sandbox_id', 'egress'], properties: ['sandbox_id', 'egress', 'wait'] },
  sandbox_network_log: { required: ['sandbox_id'], properties: ['sandbox_id', 'verdict', 'after', 'limit'], readOnly: true },
  sandbox_snapshot: { required: ['sandbox_id'], properties: ['sandbox_id', 'name', 'wait'] },
  sandbox_snapshots: { required: [], properties: ['sandbox_id'], readOnly: true },
  sandbox_snapshot_delete: { required: ['snapshot_id'], properties: ['snapshot_id'], destructive: true },
  sandbox_snapshot_copy: { required: ['snapshot_id', 'worker'], properties: ['snapshot_id', 'worker', 'wait'] },
  sandbox_fork: { required: ['sandbox_id'], properties: ['sandbox_id', 'count', 'wait'] },
  sandbox_templates: { required: [], properties: [], readOnly: true },
  sandbox_template_build: { required: ['template'], properties: ['template', 'steps', 'sandbox', 'config', 'build_id', 'cancel', 'wait', 'timeout_seconds'] },
  sandbox_volume_create: { required: ['name', 'size_mib'], properties: ['name', 'size_mib'] },
  sandbox_volumes: { required: [], properties: [], readOnly: true },
  sandbox_volume_delete: { required: ['volume'], properties: ['volume'], destructive: true },
};
// A route access token (API tokens are sbt_…).
const ROUTE_TOKEN = /^sbr_[A-Za-z0-9_-]{20,}$/;
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

// ------------------------------------------------------------------ running checks

let passed = 0;
const cleanups = []; // async functions, run in reverse order at exit

class CheckFailed extends Error {}

function assert(cond, msg) {
  if (!cond) throw new CheckFailed(msg);
}

function show(v) {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 600 ? s.slice(0, 600) + '…' : s;
}

function eq(actual, expected, what) {
  if (!isDeepStrictEqual(actual, expected)) {
    throw new CheckFailed(`${what}: expected ${show(expected)}, got ${show(actual)}`);
  }
}

async function runCleanups() {
  while (cleanups.length > 0) {
    const fn = cleanups.pop();
    try {
      await Promise.race([fn(), sleep(30000)]);
    } catch {
      // best effort: the integration test also deletes the tenant's sandboxes
    }
  }
}

async function check(name, fn) {
  const t0 = Date.now();
  try {
    const note = await fn();
    passed++;
    console.log(`ok   ${name} (${Date.now() - t0} ms)${note ? ': ' + note : ''}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e instanceof CheckFailed ? e.message : e?.stack || e}`);
    for (const s of servers) {
      const tail = s.stderr.trim().split('\n').slice(-15).join('\n    ');
      if (tail) console.log(`  stderr of ${s.label} (last lines):\n    ${tail}`);
    }
    await runCleanups();
    process.exit(1);
  }
}

// ------------------------------------------------------------------ JSON Schema

const ajvs = {};
function ajvFor(schema) {
  const dialect = typeof schema.$schema === 'string' ? schema.$schema : '';
  // MCP 2025-11-25: a schema without $schema is JSON Schema 2020-12
  const kind = dialect.includes('draft-07') || dialect.includes('draft-06') ? '07'
    : dialect.includes('2019-09') ? '2019' : '2020';
  if (!ajvs[kind]) {
    const Cls = kind === '07' ? Ajv : kind === '2019' ? Ajv2019 : Ajv2020;
    ajvs[kind] = new Cls({ strict: false, allErrors: true, validateSchema: true });
    addFormats(ajvs[kind]);
  }
  return ajvs[kind];
}

// Compiles a tool schema (throws CheckFailed naming the tool and the problem).
function compileSchema(schema, what) {
  assert(schema && typeof schema === 'object' && !Array.isArray(schema), `${what} is not a JSON object: ${show(schema)}`);
  eq(schema.type, 'object', `${what}.type`);
  try {
    return ajvFor(schema).compile(schema);
  } catch (e) {
    throw new CheckFailed(`${what} does not compile as JSON Schema: ${e.message}`);
  }
}

function schemaErrors(validate) {
  return (validate.errors || []).map((e) => `${e.instancePath || '/'} ${e.message}`).join('; ');
}

// ------------------------------------------------------------------ SDK side

const servers = []; // { label, stderr } of every server started, for failure output

function isolatedConfigDir() {
  // an empty $XDG_CONFIG_HOME: no developer's ~/.config/sandbox/config leaks in
  const dir = mkdtempSync(join(tmpdir(), 'sbx-mcp-test-'));
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// When this test last aborted a call (see client.onerror).
let lastAbortAt = 0;

// Starts sandbox-mcp through the SDK and connects a Client to it.
async function connect(label, { env = {}, args = [] } = {}) {
  const transport = new StdioClientTransport({ command: MCP, args, env, stderr: 'pipe' });
  const rec = { label, stderr: '', logs: [], sdkErrors: [], answered: new Set() };
  servers.push(rec);
  transport.stderr.on('data', (b) => {
    rec.stderr = (rec.stderr + b.toString()).slice(-65536);
  });
  const client = new Client({ name: 'sandbox-mcp-tests', version: '1.0.0' }, { capabilities: {} });
  client.onerror = (e) => {
    const msg = String(e?.message || e);
    // A progress notification the server sent before our cancellation
    // reached it arrives after the SDK dropped the request's handler: an
    // inherent race of cancellation (the MCP spec allows it), not malformed
    // JSON-RPC. Accepted only right after this test aborted a call.
    if (msg.startsWith('Received a progress notification for an unknown token') && Date.now() - lastAbortAt < 2000) {
      rec.lateProgress = (rec.lateProgress || 0) + 1;
      return;
    }
    // The SDK (1.32) handles a response at once but a notification in a
    // later microtask: a progress notification that arrives together with
    // its call's response (sent just before it) finds its handler gone. Not
    // a server fault as long as the call was answered, i.e. the server sent
    // the notification before the response.
    const token = /unknown token: (.*)$/.exec(msg);
    if (token) {
      try {
        if (rec.answered.has(Number(JSON.parse(token[1]).params.progressToken))) {
          rec.lateProgress = (rec.lateProgress || 0) + 1;
          return;
        }
      } catch {
        // not the JSON we expect: an error like any other
      }
    }
    rec.sdkErrors.push(msg);
  };
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => rec.logs.push(n.params));
  await client.connect(transport, { timeout: 15000 });
  // Note the ids of answered requests (see onerror above).
  const onmessage = transport.onmessage;
  transport.onmessage = (m, extra) => {
    if (m && m.id !== undefined && ('result' in m || 'error' in m)) rec.answered.add(Number(m.id));
    onmessage?.(m, extra);
  };
  cleanups.push(async () => client.close());
  return { client, rec, transport };
}

let toolsByName = {};
const inputValidators = {};
const outputValidators = {};

async function callTool(client, name, args, opts = {}) {
  if (inputValidators[name] && !inputValidators[name](args)) {
    throw new CheckFailed(`the arguments ${show(args)} do not match ${name}'s inputSchema: ` +
      schemaErrors(inputValidators[name]));
  }
  return client.callTool({ name, arguments: args }, undefined, { timeout: 150000, ...opts });
}

function textBlocks(res) {
  return (res.content || []).filter((c) => c.type === 'text').map((c) => c.text);
}

// A successful result: structuredContent matches the outputSchema and equals
// the JSON of a text block. Returns structuredContent.
function expectOk(name, res) {
  if (res.isError) {
    throw new CheckFailed(`${name} returned isError: ${textBlocks(res).join(' | ')}`);
  }
  const sc = res.structuredContent;
  assert(sc && typeof sc === 'object' && !Array.isArray(sc), `${name}: no structuredContent object in ${show(res)}`);
  const v = outputValidators[name];
  if (v && !v(sc)) {
    throw new CheckFailed(`${name}: structuredContent does not match the outputSchema: ${schemaErrors(v)}; ` +
      `structuredContent=${show(sc)}`);
  }
  const same = textBlocks(res).some((t) => {
    try {
      return isDeepStrictEqual(JSON.parse(t), sc);
    } catch {
      return false;
    }
  });
  assert(same, `${name}: no text block holds the same JSON as structuredContent; text=${show(textBlocks(res))}`);
  return sc;
}

// A tool error: isError, no structuredContent, a text block
// {"error":{"code":CODE,"message":…}}. Returns the error object.
function expectErr(name, res, code) {
  assert(res.isError === true, `${name}: expected isError with code ${code}, got a success: ${show(res)}`);
  assert(res.structuredContent === undefined, `${name}: an error result carries structuredContent ${show(res.structuredContent)}`);
  let err;
  for (const t of textBlocks(res)) {
    try {
      const doc = JSON.parse(t);
      if (doc && doc.error) err = doc.error;
    } catch {
      // not the JSON block
    }
  }
  assert(err, `${name}: no text block of JSON {"error":{…}} in ${show(res.content)}`);
  eq(err.code, code, `${name}: error.code (message: ${err.message})`);
  assert(typeof err.message === 'string' && err.message.length > 0, `${name}: empty error.message`);
  return err;
}

// Waits up to ms for pred() to hold.
async function until(ms, pred) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred()) return true;
    await sleep(50);
  }
  return pred();
}

// ------------------------------------------------------------------ raw JSON-RPC side

// sandbox-mcp spawned directly: lines in, lines out, no SDK in between.
class RawServer {
  constructor(label, { env = {}, args = [] } = {}) {
    this.rec = { label, stderr: '' };
    servers.push(this.rec);
    this.messages = [];
    this.badLines = [];
    this.notRpc = [];
    this.exited = null;
    this.proc = spawn(MCP, args, { env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let buf = '';
    this.proc.stdout.on('data', (b) => {
      buf += b.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i).replace(/\r$/, '');
        buf = buf.slice(i + 1);
        if (line === '') continue;
        try {
          const m = JSON.parse(line);
          if (m === null || typeof m !== 'object' || m.jsonrpc !== '2.0') this.notRpc.push(line);
          this.messages.push(m);
        } catch {
          this.badLines.push(line);
        }
      }
    });
    this.proc.stderr.on('data', (b) => {
      this.rec.stderr = (this.rec.stderr + b.toString()).slice(-65536);
    });
    this.exitPromise = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        this.exited = { code, signal, at: Date.now() };
        resolve(this.exited);
      });
    });
    this.proc.stdin.on('error', () => {}); // EPIPE after an early exit shows up as the exit status
    cleanups.push(async () => {
      if (!this.exited) this.proc.kill('SIGKILL');
    });
  }

  sendLine(line) {
    this.proc.stdin.write(line + '\n');
  }

  send(obj) {
    this.sendLine(JSON.stringify(obj));
  }

  // The first message (from now on or already received) matching pred.
  async next(pred, ms, what) {
    const end = Date.now() + ms;
    for (;;) {
      const i = this.messages.findIndex(pred);
      if (i >= 0) return this.messages.splice(i, 1)[0];
      if (this.exited) throw new CheckFailed(`${what}: sandbox-mcp exited (${show(this.exited)}) before answering`);
      if (Date.now() > end) {
        throw new CheckFailed(`${what}: no answer within ${ms} ms; unconsumed messages: ${show(this.messages)}`);
      }
      await sleep(20);
    }
  }

  async response(id, ms, what) {
    return this.next((m) => m.id === id && ('result' in m || 'error' in m), ms, what);
  }

  async initialize(version, id = 1) {
    this.send({
      jsonrpc: '2.0', id, method: 'initialize',
      params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'raw-test', version: '0' } },
    });
    const m = await this.response(id, 5000, `initialize ${version}`);
    assert(m.result, `initialize ${version}: error ${show(m.error)}`);
    return m.result;
  }

  // Closes stdin; resolves with {code, signal, ms} or throws after ms.
  async closeStdin(ms) {
    const t0 = Date.now();
    this.proc.stdin.end();
    const r = await Promise.race([this.exitPromise, sleep(ms).then(() => null)]);
    if (!r) {
      this.proc.kill('SIGKILL');
      throw new CheckFailed(`sandbox-mcp still running ${ms} ms after its stdin closed`);
    }
    return { ...r, ms: r.at - t0 };
  }
}

function rawEnv(extra = {}) {
  return { SANDBOX_URL: URL, SANDBOX_TOKEN: TOKEN, XDG_CONFIG_HOME: isolatedConfigDir(), ...extra };
}

// ------------------------------------------------------------------ the checks

async function main() {
  if (!MCP || !URL || !TOKEN) {
    console.log('FAIL setup: SANDBOX_MCP, SANDBOX_URL and SANDBOX_TOKEN must be set ' +
      `(SANDBOX_MCP=${MCP || ''} SANDBOX_URL=${URL || ''} SANDBOX_TOKEN ${TOKEN ? 'set' : 'unset'})`);
    process.exit(1);
  }
  try {
    accessSync(MCP, fsc.X_OK);
  } catch {
    console.log(`FAIL setup: ${MCP} does not exist or is not executable (build it: ninja -C build)`);
    process.exit(1);
  }
  console.log(`# sandbox-mcp ${MCP} against ${URL}, image ${IMAGE}`);

  // ---- startup and configuration

  await check('--help prints usage and exits 0', async () => {
    const out = await new Promise((resolve, reject) => {
      const p = spawn(MCP, ['--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let text = '';
      p.stdout.on('data', (b) => (text += b));
      p.stderr.on('data', (b) => (text += b));
      const t = setTimeout(() => { p.kill('SIGKILL'); reject(new CheckFailed('--help did not exit within 5 s')); }, 5000);
      p.on('exit', (code) => { clearTimeout(t); resolve({ code, text }); });
    });
    eq(out.code, 0, 'exit status of --help');
    assert(/usage/i.test(out.text), `--help printed no usage: ${show(out.text)}`);
  });

  // --log-level info: the contract has the cancellation logged on stderr,
  // which sandbox-mcp does at level info (its default stderr level is warning)
  const primary = await connect('sandbox-mcp (SDK)', {
    env: { SANDBOX_URL: URL, SANDBOX_TOKEN: TOKEN, XDG_CONFIG_HOME: isolatedConfigDir() },
    args: ['--log-level', 'info'],
  });
  const { client } = primary;

  await check('initialize: capabilities tools and logging, protocol ' + LATEST, async () => {
    const caps = client.getServerCapabilities();
    assert(caps && caps.tools, `no tools capability: ${show(caps)}`);
    assert(caps.logging, `no logging capability: ${show(caps)}`);
    const info = client.getServerVersion();
    assert(info && typeof info.name === 'string' && typeof info.version === 'string', `serverInfo: ${show(info)}`);
    return `${info.name} ${info.version}`;
  });

  await check('ping and logging/setLevel answer', async () => {
    eq(await client.ping({ timeout: 2000 }), {}, 'ping result');
    await client.setLoggingLevel('debug', { timeout: 2000 });
  });

  await check(`tools/list: the ${Object.keys(TOOLS).length} tools, schemas compile, annotations`, async () => {
    const { tools } = await client.listTools(undefined, { timeout: 5000 });
    toolsByName = Object.fromEntries(tools.map((t) => [t.name, t]));
    eq(tools.length, Object.keys(TOOLS).length, `number of tools (${show(Object.keys(toolsByName))})`);
    // what an agent's context pays for the tool list (issue 28 item 6: 42 KB
    // once; the shared object schemas are short now; 29000 before the three
    // snapshot tools, which take about 2700; 31500 before sandbox_pause,
    // sandbox_resume and sandbox_fork, which take about 3300; 34500 before
    // sandbox_templates and sandbox_create's template and auto_pause, about 1100;
    // 35600 before the three volume tools and sandbox_create's volumes, about 2900;
    // 38500 before sandbox_template_build, about 1650; 40200 before
    // sandbox_create's egress, about 170; 40400 before sandbox_network, about 1000;
    // 41450 before sandbox_create's secrets, about 180; 41650 before sandbox_network_log, about 800;
    // 42450 before sandbox_snapshot_copy and sandbox_template_build's cancel, about 1150)
    const listBytes = JSON.stringify({ tools }).length;
    assert(listBytes <= 43700, `tools/list is ${listBytes} bytes of JSON, over its budget of 43700`);
    for (const [name, want] of Object.entries(TOOLS)) {
      const t = toolsByName[name];
      assert(t, `tool ${name} missing; tools are ${show(Object.keys(toolsByName))}`);
      assert(typeof t.description === 'string' && t.description.length > 0, `${name} has no description`);
      inputValidators[name] = compileSchema(t.inputSchema, `${name}.inputSchema`);
      outputValidators[name] = compileSchema(t.outputSchema, `${name}.outputSchema`);
      const props = Object.keys(t.inputSchema.properties || {});
      for (const p of want.properties) {
        assert(props.includes(p), `${name}.inputSchema has no property ${p} (has ${show(props)})`);
      }
      const req = t.inputSchema.required || [];
      for (const p of want.required) {
        assert(req.includes(p), `${name}.inputSchema.required lacks ${p} (is ${show(req)})`);
      }
      for (const p of want.optional || []) {
        assert(!req.includes(p), `${name}.inputSchema.required has ${p}, which is optional (is ${show(req)})`);
      }
      const a = t.annotations || {};
      if (want.readOnly) eq(a.readOnlyHint, true, `${name}.annotations.readOnlyHint`);
      if (want.destructive) eq(a.destructiveHint, true, `${name}.annotations.destructiveHint`);
      if (a.readOnlyHint === true && !want.readOnly) throw new CheckFailed(`${name} claims readOnlyHint but changes state`);
    }
    const extra = Object.keys(toolsByName).filter((n) => !(n in TOOLS));
    return `${tools.length} tools${extra.length ? ' (also: ' + extra.join(', ') + ')' : ''}`;
  });

  await check('inputSchemas accept the contract and refuse what it forbids', async () => {
    const c = inputValidators.sandbox_create;
    for (const network of ['none', 'restricted', 'open']) {
      assert(c({ image: 'x', network }), `sandbox_create refuses network ${network}: ${schemaErrors(c)}`);
    }
    for (const isolation of ['container', 'gvisor', 'microvm']) {
      assert(c({ image: 'x', isolation }), `sandbox_create refuses isolation ${isolation}: ${schemaErrors(c)}`);
    }
    assert(c({ image: 'x', env: { A: 'b' }, labels: { k: 'v' }, selector: { z: 'a' }, wait: true, timeout_seconds: 5 }),
      `sandbox_create refuses maps and wait: ${schemaErrors(c)}`);
    assert(c({}), `sandbox_create refuses arguments without image (the server's default applies): ${schemaErrors(c)}`);
    assert(!c({ image: 5 }), 'sandbox_create accepts a number as image');
    assert(!c({ imgae: 'x' }), 'sandbox_create accepts an unknown argument');
    const imageDoc = toolsByName.sandbox_create.inputSchema.properties.image.description || '';
    assert(/default/.test(imageDoc), `sandbox_create's image says nothing of the default: ${show(imageDoc)}`);
    assert(!c({ image: 'x', network: 'everywhere' }), 'sandbox_create accepts network "everywhere"');
    assert(c({ volumes: [{ volume: 'v', path: '/v', read_only: true }] }), `sandbox_create refuses a mount: ${schemaErrors(c)}`);
    assert(!c({ volumes: [{ volume: 'v' }] }), 'sandbox_create accepts a mount without path');
    const x = inputValidators.sandbox_exec;
    assert(x({ sandbox_id: 'sbx_a', argv: ['echo', 'hi'] }), `sandbox_exec refuses a plain argv: ${schemaErrors(x)}`);
    assert(!x({ sandbox_id: 'sbx_a', argv: [] }), 'sandbox_exec accepts an empty argv');
    assert(!x({ sandbox_id: 'sbx_a', argv: [1] }), 'sandbox_exec accepts a non-string argv element');
    assert(!x({ sandbox_id: 'sbx_a', argv: 'echo hi' }), 'sandbox_exec accepts argv as a string');
    const sh = inputValidators.sandbox_share;
    assert(sh({ sandbox_id: 'sbx_a', port: 8080 }), `sandbox_share refuses a plain port: ${schemaErrors(sh)}`);
    for (const auth of ['token', 'public']) {
      assert(sh({ sandbox_id: 'sbx_a', port: 1, auth, ttl_seconds: 60, wait: false }),
        `sandbox_share refuses auth ${auth}: ${schemaErrors(sh)}`);
    }
    assert(!sh({ sandbox_id: 'sbx_a', port: 0 }), 'sandbox_share accepts port 0');
    assert(!sh({ sandbox_id: 'sbx_a', port: 65536 }), 'sandbox_share accepts port 65536');
    assert(!sh({ sandbox_id: 'sbx_a', port: 80, auth: 'maybe' }), 'sandbox_share accepts auth "maybe"');
    assert(!sh({ sandbox_id: 'sbx_a' }), 'sandbox_share accepts arguments without port');
    assert(!inputValidators.sandbox_unshare({ sandbox_id: 'sbx_a' }), 'sandbox_unshare accepts arguments without route_id');
  });

  // ---- the lifecycle

  let sbx;
  let createOp;
  const sbxName = `mcp-${process.pid}-${Date.now() % 100000}`;
  await check('sandbox_create wait=true: the sandbox runs', async () => {
    const progress = [];
    const res = await callTool(client, 'sandbox_create', {
      name: sbxName, image: IMAGE, cpu_millis: 200, memory_mib: 64, ttl_seconds: 600, network: 'none',
      labels: { suite: 'mcp' }, wait: true, timeout_seconds: 120,
    }, { onprogress: (p) => progress.push(p) });
    const sc = expectOk('sandbox_create', res);
    eq(sc.sandbox.name, sbxName, 'sandbox.name');
    assert(sc.sandbox && /^sbx_/.test(sc.sandbox.id), `sandbox.id: ${show(sc.sandbox)}`);
    assert(sc.operation && /^op_/.test(sc.operation.id), `operation.id: ${show(sc.operation)}`);
    sbx = sc.sandbox.id;
    createOp = sc.operation.id;
    cleanups.push(async () => callTool(client, 'sandbox_delete', { sandbox_id: sbx }, { timeout: 10000 }));
    eq(sc.operation.state, 'succeeded', 'state of the waited-for create operation');
    eq(sc.operation.kind, 'create', 'operation.kind');
    return `${sbx}, ${progress.length} progress notification(s)`;
  });

  await check('sandbox_wait on the finished create: done', async () => {
    const sc = expectOk('sandbox_wait', await callTool(client, 'sandbox_wait', { operation_id: createOp, timeout_seconds: 30 }));
    eq(sc.done, true, 'done');
    eq(sc.operation.id, createOp, 'operation.id');
    eq(sc.operation.state, 'succeeded', 'operation.state');
  });

  await check('operation_get on the create', async () => {
    const sc = expectOk('operation_get', await callTool(client, 'operation_get', { operation_id: createOp }));
    eq(sc.operation.id, createOp, 'operation.id');
    eq(sc.operation.sandbox_id, sbx, 'operation.sandbox_id');
  });

  await check('sandbox_exec and sandbox_get by the name given at create', async () => {
    const sc = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbxName, argv: ['echo', 'by name'], timeout_seconds: 30 }));
    eq(sc.stdout, 'by name\n', 'stdout');
    const g = expectOk('sandbox_get', await callTool(client, 'sandbox_get', { sandbox_id: sbxName }));
    eq(g.sandbox.id, sbx, 'sandbox_get by name: sandbox.id');
  });

  await check('sandbox_exec echo hello', async () => {
    const sc = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['echo', 'hello'], timeout_seconds: 30, max_output_bytes: 4096 }));
    eq(sc.stdout, 'hello\n', 'stdout');
    eq(sc.exit_code, 0, 'exit_code');
    eq(sc.timed_out, false, 'timed_out');
    eq(sc.stdout_truncated, false, 'stdout_truncated');
    eq(sc.stdout_bytes, 6, 'stdout_bytes');
    eq(sc.stderr, '', 'stderr');
    assert(/^op_/.test(sc.operation_id), `operation_id: ${show(sc.operation_id)}`);
    for (const k of ['signal', 'duration_ms', 'stderr_truncated', 'stderr_bytes']) {
      assert(k in sc, `no ${k} in ${show(sc)}`);
    }
  });

  await check('sandbox_exec with stdin and stdin_b64; binary output comes back in stdout_b64', async () => {
    const t = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['cat'], stdin: 'from stdin\n', timeout_seconds: 30 }));
    eq(t.stdout, 'from stdin\n', 'stdout of cat with stdin');
    assert(!('stdout_b64' in t), `text output has stdout_b64: ${show(t)}`);
    const b = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['cat'], stdin_b64: 'YQBi/w==', timeout_seconds: 30 }));
    eq(b.stdout_b64, 'YQBi/w==', 'stdout_b64 of cat with binary stdin');
    eq(b.stdout_bytes, 4, 'stdout_bytes');
    // the same output, read back from an offset with sandbox_exec_output
    const o = expectOk('sandbox_exec_output', await callTool(client, 'sandbox_exec_output',
      { operation_id: t.operation_id, offset: 5 }));
    eq(o.done, true, 'done of a finished exec');
    eq(o.chunks.map((c) => c.data).join(''), 'stdin\n', 'output from offset 5');
    eq(o.next_offset, 11, 'next_offset');
    // as another user, as sandbox exec -u
    const u = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['id', '-u'], user: 'nobody', timeout_seconds: 30 }));
    eq(u.stdout, '65534\n', 'id -u of an exec with user nobody');
  });

  await check('sandbox_exec detach, sandbox_exec_output with wait, sandbox_cancel', async () => {
    const d = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['sh', '-c', 'echo started; sleep 300'], detach: true, timeout_seconds: 600 }));
    eq(d.detached, true, 'detached');
    assert(/^op_/.test(d.operation_id), `operation_id: ${show(d.operation_id)}`);
    let seen = '';
    let off = 0;
    for (let i = 0; i < 10 && !seen.includes('started'); i++) {
      const o = expectOk('sandbox_exec_output', await callTool(client, 'sandbox_exec_output',
        { operation_id: d.operation_id, offset: off, wait_seconds: 5 }));
      seen += o.chunks.map((c) => c.data).join('');
      off = o.next_offset;
    }
    assert(seen.includes('started'), `no "started" in the output of the detached command: ${show(seen)}`);
    const c = expectOk('sandbox_cancel', await callTool(client, 'sandbox_cancel', { operation_id: d.operation_id }));
    eq(c.operation.id, d.operation_id, 'cancelled operation');
    const w = await callTool(client, 'sandbox_wait', { operation_id: d.operation_id, timeout_seconds: 60 });
    const op = expectOk('operation_get', await callTool(client, 'operation_get', { operation_id: d.operation_id }));
    eq(op.operation.state, 'cancelled', `state after sandbox_cancel (wait said ${show(w)})`);
  });

  await check('sandbox_exec sh -c "exit 3": exit_code 3 is not isError', async () => {
    const sc = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['sh', '-c', 'echo oops >&2; exit 3'], timeout_seconds: 30 }));
    eq(sc.exit_code, 3, 'exit_code');
    eq(sc.stderr, 'oops\n', 'stderr');
  });

  await check('sandbox_exec env, cwd and bounded output (truncation flags)', async () => {
    const sc = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec', {
      sandbox_id: sbx, argv: ['sh', '-c', 'echo "$GREETING $(pwd)"; head -c 5000 /dev/zero >&2'],
      env: { GREETING: 'hi' }, cwd: '/tmp', max_output_bytes: 100, timeout_seconds: 30,
    }));
    eq(sc.stdout, 'hi /tmp\n', 'stdout with env and cwd');
    eq(sc.stderr_truncated, true, 'stderr_truncated');
    eq(sc.stderr_bytes, 5000, 'stderr_bytes');
    assert(sc.stderr.length <= 100, `stderr kept ${sc.stderr.length} characters, bound 100`);
  });

  await check('sandbox_exec reports progress while the command runs', async () => {
    const progress = [];
    const sc = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['sleep', '3'], timeout_seconds: 30 }, { onprogress: (p) => progress.push(p) }));
    eq(sc.exit_code, 0, 'exit_code of sleep 3');
    assert(progress.length >= 1, 'no notifications/progress during a 3 s exec with a progressToken');
    assert(progress.length <= 6, `${progress.length} notifications/progress during a 3 s exec (expected about one a second)`);
    return `${progress.length} progress notification(s)`;
  });

  await check('sandbox_write_file, sandbox_read_file, sandbox_list_files: text and bytes round-trip', async () => {
    const w = expectOk('sandbox_write_file', await callTool(client, 'sandbox_write_file',
      { sandbox_id: sbx, path: '/work/new/dir/hello.py', content: 'print("héllo")\n', mode: '755' }));
    eq(w.bytes, Buffer.byteLength('print("héllo")\n'), 'bytes written (directories made first)');
    const r = expectOk('sandbox_read_file', await callTool(client, 'sandbox_read_file',
      { sandbox_id: sbx, path: '/work/new/dir/hello.py' }));
    eq(r.encoding, 'utf-8', 'encoding of a text file');
    eq(r.content, 'print("héllo")\n', 'content read back');
    eq(r.truncated, false, 'truncated');
    const bin = Buffer.from([0, 1, 2, 255, 254, 10, 0]);
    expectOk('sandbox_write_file', await callTool(client, 'sandbox_write_file',
      { sandbox_id: sbx, path: '/work/new/bin.dat', content_base64: bin.toString('base64') }));
    const rb = expectOk('sandbox_read_file', await callTool(client, 'sandbox_read_file',
      { sandbox_id: sbx, path: '/work/new/bin.dat' }));
    eq(rb.encoding, 'base64', 'encoding of bytes that are not text');
    eq(Buffer.from(rb.content, 'base64').equals(bin), true, 'the bytes read back');
    const part = expectOk('sandbox_read_file', await callTool(client, 'sandbox_read_file',
      { sandbox_id: sbx, path: '/work/new/dir/hello.py', max_bytes: 5 }));
    eq(part.content, 'print', 'a read cut at max_bytes');
    eq(part.truncated, true, 'truncated at max_bytes');
    const l = expectOk('sandbox_list_files', await callTool(client, 'sandbox_list_files', { sandbox_id: sbx, path: '/work/new' }));
    const names = l.entries.map((e) => e.name).sort();
    eq(names, ['bin.dat', 'dir'], 'the directory listing');
    eq(l.entries.find((e) => e.name === 'dir').type, 'dir', 'a listed directory\'s type');
    const x = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['stat', '-c', '%a', '/work/new/dir/hello.py'], timeout_seconds: 30 }));
    eq(x.stdout, '755\n', 'the mode written');
    expectErr('sandbox_read_file', await callTool(client, 'sandbox_read_file',
      { sandbox_id: sbx, path: '/work/no/such/file' }), 'not_found');
    expectErr('sandbox_read_file', await callTool(client, 'sandbox_read_file',
      { sandbox_id: sbx, path: 'relative' }), 'invalid_argument');
    expectErr('sandbox_write_file', await callTool(client, 'sandbox_write_file',
      { sandbox_id: sbx, path: '/work/x', content: 'a', content_base64: 'YQ==' }), 'invalid_argument');
  });

  await check('sandbox_exec progress carries the latest output line', async () => {
    const progress = [];
    const sc = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: sbx, argv: ['sh', '-c', 'echo step-one; sleep 3; echo step-two'], timeout_seconds: 30 },
      { onprogress: (p) => progress.push(p) }));
    eq(sc.stdout, 'step-one\nstep-two\n', 'stdout');
    const withLine = progress.filter((p) => typeof p.message === 'string' && p.message.endsWith(': step-one'));
    assert(withLine.length >= 1, `no progress message ending in the output line: ${show(progress.map((p) => p.message))}`);
    return `${withLine.length} of ${progress.length} notification(s) with the line`;
  });

  await check('sandbox_get: running, with its newest operations in short (a small answer after many execs)', async () => {
    const sc = expectOk('sandbox_get', await callTool(client, 'sandbox_get', { sandbox_id: sbx }));
    eq(sc.sandbox.id, sbx, 'sandbox.id');
    eq(sc.sandbox.phase, 'running', 'sandbox.phase');
    eq(sc.sandbox.labels, { suite: 'mcp' }, 'sandbox.labels');
    assert(Array.isArray(sc.operations) && sc.operations.length > 0 && sc.operations.length <= 10,
      `operations: ${show(sc.operations)}`);
    const exec = sc.operations.find((o) => o.kind === 'exec' && o.state === 'succeeded');
    assert(exec && typeof exec.result.exit_code === 'number' && exec.result.stdout === undefined && exec.history === undefined,
      `an exec in short (exit code, no output, no history): ${show(exec)}`);
    const op = expectOk('operation_get', await callTool(client, 'operation_get', { operation_id: exec.id }));
    assert(typeof op.operation.result.stdout === 'string', `operation_get shows the exec whole: ${show(op)}`);
    const bytes = JSON.stringify(sc).length;
    assert(bytes < 6000, `sandbox_get answered ${bytes} bytes`);
    return `${bytes} bytes, ${sc.operations.length} operations (create ${createOp} ${sc.operations.some((o) => o.id === createOp) ? 'among them' : 'older'})`;
  });

  let eventsCursor = 0;
  await check('sandbox_pools: the warm pools this token may take from, as a list', async () => {
    const sc = expectOk('sandbox_pools', await callTool(client, 'sandbox_pools', {}));
    assert(Array.isArray(sc.pools), `pools is not a list: ${show(sc)}`);
  });

  await check('sandbox_list_images: the image this test runs on, on a worker, with its isolation classes', async () => {
    const sc = expectOk('sandbox_list_images', await callTool(client, 'sandbox_list_images', {}));
    assert(Array.isArray(sc.images), `images is not a list: ${show(sc)}`);
    const img = sc.images.find((i) => i.name === IMAGE);
    assert(img, `${IMAGE} is not among ${show(sc.images.map((i) => i.name))}`);
    assert(img.workers.length >= 1 && img.isolation.includes('container'), `${IMAGE}: ${show(img)}`);
    return `${sc.images.length} image(s)`;
  });

  await check('sandbox_events: the sandbox\'s life so far, oldest first; after=next_after gives nothing new', async () => {
    const sc = expectOk('sandbox_events', await callTool(client, 'sandbox_events', { sandbox_id: sbx, limit: 1000 }));
    const kinds = sc.events.map((e) => e.kind);
    for (const k of ['sandbox.pending', 'operation.admitted', 'sandbox.scheduled', 'sandbox.running']) {
      assert(kinds.includes(k), `no ${k} among ${show(kinds)}`);
    }
    const ids = sc.events.map((e) => e.id);
    assert(ids.every((id, i) => i === 0 || id > ids[i - 1]), `ids not increasing: ${show(ids)}`);
    assert(sc.events.every((e) => e.sandbox_id === sbx), 'an event of another sandbox');
    eq(sc.next_after, ids[ids.length - 1], 'next_after is the last id');
    const again = expectOk('sandbox_events', await callTool(client, 'sandbox_events', { sandbox_id: sbx, after: sc.next_after }));
    eq([again.events.length, again.next_after], [0, sc.next_after], 'events after next_after, and the cursor');
    eventsCursor = sc.next_after;
    return `${ids.length} events, ${kinds[0]} … ${kinds[kinds.length - 1]}`;
  });

  await check('sandbox_events wait: a new event (an exec) ends the wait at once', async () => {
    const t0 = Date.now();
    const waiting = callTool(client, 'sandbox_events', { sandbox_id: sbx, after: eventsCursor, wait: 20, kind: 'operation.*' });
    await new Promise((r) => setTimeout(r, 500));
    expectOk('sandbox_exec', await callTool(client, 'sandbox_exec', { sandbox_id: sbx, argv: ['true'], timeout_seconds: 30 }));
    const sc = expectOk('sandbox_events', await waiting);
    const ms = Date.now() - t0;
    assert(sc.events.length > 0 && sc.events.every((e) => e.kind.startsWith('operation.') && e.id > eventsCursor),
      `events: ${show(sc.events)}`);
    assert(ms < 15000, `the wait of 20 s ended after ${ms} ms, not at the event`);
    return `answered after ${ms} ms with ${sc.events.map((e) => e.kind).join(', ')}`;
  });

  await check('sandbox_events: isError invalid_argument for a malformed kind', async () => {
    expectErr('sandbox_events', await callTool(client, 'sandbox_events', { kind: 'not a kind' }), 'invalid_argument');
  });

  await check('sandbox_logs: what the main process wrote, both streams, and the last tail lines', async () => {
    // Docker copies a container's stdout and stderr on two pipes, so lines
    // written together keep their order only within one stream: the
    // stderr line comes from an exec of its own, before the stdout ones.
    expectOk('sandbox_exec', await callTool(client, 'sandbox_exec', {
      sandbox_id: sbx, argv: ['sh', '-c', 'echo log-err >/proc/1/fd/2'], timeout_seconds: 30,
    }));
    expectOk('sandbox_exec', await callTool(client, 'sandbox_exec', {
      sandbox_id: sbx, argv: ['sh', '-c', 'echo log-one >/proc/1/fd/1; echo log-two >/proc/1/fd/1'],
      timeout_seconds: 30,
    }));
    const sc = expectOk('sandbox_logs', await callTool(client, 'sandbox_logs', { sandbox_id: sbx }));
    eq(sc.text, 'log-err\nlog-one\nlog-two\n', 'text');
    eq(sc.stdout, 'log-one\nlog-two\n', 'stdout');
    eq(sc.stderr, 'log-err\n', 'stderr');
    eq(sc.truncated, false, 'truncated');
    const last = expectOk('sandbox_logs', await callTool(client, 'sandbox_logs', { sandbox_id: sbx, tail: 1 }));
    eq(last.text, 'log-two\n', 'text with tail 1');
    expectErr('sandbox_logs', await callTool(client, 'sandbox_logs', { sandbox_id: 'sbx_nope' }), 'not_found');
  });

  await check('sandbox_list contains it, also filtered by labels and phase', async () => {
    const sc = expectOk('sandbox_list', await callTool(client, 'sandbox_list', { limit: 100 }));
    assert(Array.isArray(sc.sandboxes) && sc.sandboxes.some((s) => s.id === sbx),
      `${sbx} not in ${show(sc.sandboxes.map((s) => s.id))}`);
    const byLabel = expectOk('sandbox_list', await callTool(client, 'sandbox_list', { labels: { suite: 'mcp' }, phase: 'running' }));
    assert(byLabel.sandboxes.some((s) => s.id === sbx) && byLabel.sandboxes.every((s) => s.labels.suite === 'mcp'),
      `labels {suite: mcp}, phase running: ${show(byLabel.sandboxes.map((s) => s.id))}`);
    const none = expectOk('sandbox_list', await callTool(client, 'sandbox_list', { labels: { suite: 'no-such' } }));
    eq(none.sandboxes.length, 0, 'sandboxes with a label no sandbox has');
    expectErr('sandbox_list', await callTool(client, 'sandbox_list', { phase: 'sleeping' }), 'invalid_argument');
  });

  // ---- the TTL of the running sandbox

  await check('sandbox_extend: expires ttl_seconds from now, an extend operation already succeeded', async () => {
    const before = expectOk('sandbox_get', await callTool(client, 'sandbox_get', { sandbox_id: sbx }));
    const t0 = Date.now();
    const sc = expectOk('sandbox_extend', await callTool(client, 'sandbox_extend', { sandbox_id: sbx, ttl_seconds: 1800 }));
    eq([sc.operation.kind, sc.operation.state], ['extend', 'succeeded'], 'operation kind and state');
    eq(sc.previous_expires_at, before.sandbox.expires_at, 'previous_expires_at');
    const at = Date.parse(sc.expires_at);
    assert(Math.abs(at - (t0 + 1800 * 1000)) < 60000, `expires_at ${sc.expires_at} is not 1800 s from now`);
    eq(sc.operation.result.expires_at, sc.expires_at, 'operation.result.expires_at');
    const after = expectOk('sandbox_get', await callTool(client, 'sandbox_get', { sandbox_id: sbx }));
    eq(after.sandbox.expires_at, sc.expires_at, 'sandbox.expires_at after the extend');
    return `${before.sandbox.expires_at} -> ${sc.expires_at}`;
  });

  await check('sandbox_extend idempotency_key: the same operation again; another ttl with the key is a conflict', async () => {
    const key = `mcp-extend-${sbx}`;
    const a = expectOk('sandbox_extend', await callTool(client, 'sandbox_extend', { sandbox_id: sbx, ttl_seconds: 1700, idempotency_key: key }));
    const b = expectOk('sandbox_extend', await callTool(client, 'sandbox_extend', { sandbox_id: sbx, ttl_seconds: 1700, idempotency_key: key }));
    eq([b.operation.id, b.expires_at], [a.operation.id, a.expires_at], 'the replayed operation and expiry');
    expectErr('sandbox_extend', await callTool(client, 'sandbox_extend', { sandbox_id: sbx, ttl_seconds: 1600, idempotency_key: key }), 'conflict');
  });

  await check('sandbox_extend isError: policy_denied over the ceiling, invalid_argument for 0, not_found', async () => {
    const err = expectErr('sandbox_extend', await callTool(client, 'sandbox_extend', { sandbox_id: sbx, ttl_seconds: 2592000 }), 'policy_denied');
    assert(err.message.includes('max_ttl_seconds'), `the refusal does not name the ceiling: ${err.message}`);
    // client.callTool directly: callTool() would refuse ttl_seconds 0 first
    expectErr('sandbox_extend', await client.callTool({ name: 'sandbox_extend', arguments: { sandbox_id: sbx, ttl_seconds: 0 } },
      undefined, { timeout: 10000 }), 'invalid_argument');
    expectErr('sandbox_extend', await callTool(client, 'sandbox_extend', { sandbox_id: 'sbx_nope', ttl_seconds: 60 }), 'not_found');
    return err.message;
  });

  await check('sandbox_network isError: conflict for a sandbox made without egress rules, invalid_argument for an IP', async () => {
    const err = expectErr('sandbox_network', await callTool(client, 'sandbox_network',
      { sandbox_id: sbx, egress: { allow: ['pypi.org'] } }), 'conflict');
    assert(err.message.includes('without egress rules'), `the refusal does not say why: ${err.message}`);
    const bad = expectErr('sandbox_network', await callTool(client, 'sandbox_network',
      { sandbox_id: sbx, egress: { allow: ['pypi.org', '10.0.0.1'] } }), 'invalid_argument');
    assert(bad.message.includes('egress.allow[1]'), `the refusal does not name the entry: ${bad.message}`);
    return err.message;
  });

  await check('sandbox_network_log: a sandbox without egress rules has no entries; a bad verdict is invalid_argument', async () => {
    const sc = expectOk('sandbox_network_log', await callTool(client, 'sandbox_network_log', { sandbox_id: sbx }));
    eq(sc.entries, [], 'entries of a sandbox without rules');
    eq(sc.next_after, 0, 'next_after of an empty log');
    expectErr('sandbox_network_log', await client.callTool({ name: 'sandbox_network_log',
      arguments: { sandbox_id: sbx, verdict: 'maybe' } }, undefined, { timeout: 10000 }), 'invalid_argument');
    expectErr('sandbox_network_log', await callTool(client, 'sandbox_network_log', { sandbox_id: 'sbx_nope' }), 'not_found');
    return `${sc.entries.length} entries`;
  });

  // ---- public routes of the running sandbox

  let route;
  let publicRoute;
  await check('sandbox_share (token, wait by default): the route URL and its access token, once', async () => {
    const sc = expectOk('sandbox_share', await callTool(client, 'sandbox_share', { sandbox_id: sbx, port: 8080, ttl_seconds: 600 }));
    eq(sc.operation.kind, 'share', 'operation.kind');
    eq(sc.operation.state, 'succeeded', `share operation state (error: ${show(sc.operation.error)})`);
    route = sc.route;
    assert(/^rt_/.test(route.id), `route.id: ${show(route)}`);
    eq([route.sandbox_id, route.port, route.auth, route.state], [sbx, 8080, 'token', 'active'], 'route sandbox_id, port, auth, state');
    assert(typeof route.url === 'string' && route.url.includes(`/r/${route.name}/`), `route.url ${show(route.url)} has no /r/${route.name}/`);
    assert(typeof route.expires_at === 'string', `a route with a TTL has no expires_at: ${show(route)}`);
    assert(ROUTE_TOKEN.test(sc.access_token || ''), `access_token is not sbr_…: ${show(sc.access_token)}`);
    return `${route.url}, token ${sc.access_token.slice(0, 4)}…`;
  });

  await check('sandbox_share auth public wait=false: no access token; sandbox_wait finishes it', async () => {
    const sc = expectOk('sandbox_share', await callTool(client, 'sandbox_share',
      { sandbox_id: sbx, port: 8081, auth: 'public', wait: false }));
    assert(!('access_token' in sc), `a public route came with an access token: ${show(sc)}`);
    eq(sc.route.auth, 'public', 'route.auth');
    assert(sc.route.url.includes(`/r/${sc.route.name}/`), `route.url: ${show(sc.route.url)}`);
    publicRoute = sc.route;
    const w = expectOk('sandbox_wait', await callTool(client, 'sandbox_wait', { operation_id: sc.operation.id, timeout_seconds: 30 }));
    eq(w.operation.state, 'succeeded', `public share operation state (error: ${show(w.operation.error)})`);
  });

  await check('sandbox_routes lists both, with their URLs and no secret', async () => {
    const sc = expectOk('sandbox_routes', await callTool(client, 'sandbox_routes', { sandbox_id: sbx }));
    const ids = sc.routes.map((r) => r.id);
    assert(ids.includes(route.id) && ids.includes(publicRoute.id), `routes ${show(ids)} lack ${route.id} or ${publicRoute.id}`);
    const r = sc.routes.find((x) => x.id === route.id);
    eq([r.url, r.state], [route.url, 'active'], 'listed url and state');
    assert(!JSON.stringify(sc).includes('access_token'), `sandbox_routes shows an access token: ${show(sc)}`);
  });

  await check('sandbox_unshare (wait by default): the route is no longer listed', async () => {
    const sc = expectOk('sandbox_unshare', await callTool(client, 'sandbox_unshare', { sandbox_id: sbx, route_id: route.id }));
    eq(sc.operation.kind, 'unshare', 'operation.kind');
    eq(sc.operation.state, 'succeeded', `unshare operation state (error: ${show(sc.operation.error)})`);
    const live = expectOk('sandbox_routes', await callTool(client, 'sandbox_routes', { sandbox_id: sbx }));
    assert(!live.routes.some((r) => r.id === route.id), `unshared ${route.id} still listed: ${show(live.routes)}`);
    const all = expectOk('sandbox_routes', await callTool(client, 'sandbox_routes', { sandbox_id: sbx, all: true }));
    const gone = all.routes.find((r) => r.id === route.id);
    assert(gone, `unshared ${route.id} not listed with all=true`);
    eq([gone.state, gone.removed_reason], ['removed', 'unshare'], 'state and removed_reason with all=true');
  });

  await check('isError not_found: sandbox_share on a missing sandbox, sandbox_unshare of a missing route', async () => {
    const err = expectErr('sandbox_share', await callTool(client, 'sandbox_share',
      { sandbox_id: 'sbx_doesnotexist000000000000', port: 8080 }), 'not_found');
    expectErr('sandbox_unshare', await callTool(client, 'sandbox_unshare',
      { sandbox_id: sbx, route_id: 'rt_aaaaaaaaaaaaaaaaaaaaaaaaaa' }), 'not_found');
    return err.message;
  });

  await check('isError invalid_argument: sandbox_share with port 0 (past the client-side schema)', async () => {
    // client.callTool directly: callTool() would refuse the arguments first
    const res = await client.callTool({ name: 'sandbox_share', arguments: { sandbox_id: sbx, port: 0 } }, undefined, { timeout: 10000 });
    return expectErr('sandbox_share', res, 'invalid_argument').message;
  });

  // A create nobody can place (no worker has label nosuch=label): it stays
  // admitted, which the progress and cancellation checks need.
  let stuck;
  let stuckOp;
  await check('sandbox_create wait=false returns at once (unplaceable selector)', async () => {
    const t0 = Date.now();
    const sc = expectOk('sandbox_create', await callTool(client, 'sandbox_create', {
      image: IMAGE, cpu_millis: 100, memory_mib: 64, ttl_seconds: 300, selector: { nosuch: 'label' },
    }));
    stuck = sc.sandbox.id;
    stuckOp = sc.operation.id;
    cleanups.push(async () => callTool(client, 'sandbox_delete', { sandbox_id: stuck }, { timeout: 10000 }));
    assert(!TERMINAL.has(sc.operation.state), `the unplaceable create is already ${sc.operation.state}`);
    assert(Date.now() - t0 < 5000, `create without wait took ${Date.now() - t0} ms`);
  });

  await check('sandbox_extend of a sandbox not running yet: expires_at null, the TTL it starts with', async () => {
    const sc = expectOk('sandbox_extend', await callTool(client, 'sandbox_extend', { sandbox_id: stuck, ttl_seconds: 120 }));
    eq([sc.operation.state, sc.expires_at], ['succeeded', null], 'operation state and expires_at');
    const got = expectOk('sandbox_get', await callTool(client, 'sandbox_get', { sandbox_id: stuck }));
    eq([got.sandbox.expires_at, got.sandbox.ttl_seconds], [null, 120], 'expires_at and ttl_seconds of the pending sandbox');
  });

  await check('sandbox_wait: progress about once a second, done=false at its timeout', async () => {
    const progress = [];
    const t0 = Date.now();
    const sc = expectOk('sandbox_wait', await callTool(client, 'sandbox_wait',
      { operation_id: stuckOp, timeout_seconds: 3 }, { onprogress: (p) => progress.push(p) }));
    const ms = Date.now() - t0;
    eq(sc.done, false, 'done after the wait timed out');
    assert(!TERMINAL.has(sc.operation.state), `operation.state ${sc.operation.state}`);
    assert(ms >= 2500 && ms < 10000, `a 3 s wait answered after ${ms} ms`);
    assert(progress.length >= 2 && progress.length <= Math.ceil(ms / 1000) + 2,
      `${progress.length} notifications/progress in a ${ms} ms wait (expected about one a second); ` +
      `first: ${show(progress[0])}, last: ${show(progress[progress.length - 1])}`);
    for (let i = 0; i < progress.length; i++) {
      assert(typeof progress[i].progress === 'number', `progress[${i}].progress: ${show(progress[i])}`);
      assert(typeof progress[i].message === 'string' && progress[i].message, `progress[${i}] has no message: ${show(progress[i])}`);
      if (i > 0) {
        assert(progress[i].progress > progress[i - 1].progress, `progress does not increase: ${show(progress)}`);
      }
      if (progress[i].total !== undefined) {
        assert(progress[i].progress <= progress[i].total, `progress[${i}] passes its total: ${show(progress[i])}`);
      }
    }
    return `${progress.length} notifications, last: ${show(progress[progress.length - 1])}`;
  });

  await check('cancellation: an aborted sandbox_wait stops at once, the server keeps serving', async () => {
    const ac = new AbortController();
    const logsBefore = primary.rec.logs.length;
    const errsBefore = primary.rec.sdkErrors.length;
    const stderrBefore = primary.rec.stderr.length;
    const t0 = Date.now();
    const p = callTool(client, 'sandbox_wait', { operation_id: stuckOp, timeout_seconds: 120 },
      { signal: ac.signal, onprogress: () => {} });
    setTimeout(() => { lastAbortAt = Date.now(); ac.abort(new Error('test cancels the wait')); }, 1000);
    let rejected = false;
    try {
      await p;
    } catch {
      rejected = true;
    }
    const ms = Date.now() - t0;
    assert(rejected, 'the aborted call resolved instead of rejecting');
    assert(ms < 3000, `the aborted call settled after ${ms} ms`);
    const t1 = Date.now();
    await client.ping({ timeout: 1000 });
    assert(Date.now() - t1 < 1000, `ping after the cancel took ${Date.now() - t1} ms`);
    const logged = await until(2000, () => /cancel/i.test(primary.rec.stderr.slice(stderrBefore)));
    assert(logged, `stderr does not mention "cancelled" after the cancel; stderr since: ${show(primary.rec.stderr.slice(stderrBefore))}`);
    const noted = await until(2000, () => primary.rec.logs.slice(logsBefore).some((l) => /cancel/i.test(show(l.data))));
    assert(noted, `no notifications/message about the cancel; log messages since: ${show(primary.rec.logs.slice(logsBefore))}`);
    await sleep(500);
    const late = primary.rec.sdkErrors.slice(errsBefore).filter((e) => /unknown message id/i.test(e));
    assert(late.length === 0, `the server answered the cancelled request: ${show(late)}`);
  });

  await check('cancellation: an aborted sandbox_exec stops at once', async () => {
    const ac = new AbortController();
    const t0 = Date.now();
    const p = callTool(client, 'sandbox_exec', { sandbox_id: sbx, argv: ['sleep', '20'], timeout_seconds: 60 },
      { signal: ac.signal, onprogress: () => {} });
    setTimeout(() => { lastAbortAt = Date.now(); ac.abort(new Error('test cancels the exec')); }, 1000);
    let rejected = false;
    try {
      await p;
    } catch {
      rejected = true;
    }
    assert(rejected, 'the aborted exec resolved instead of rejecting');
    assert(Date.now() - t0 < 3000, `the aborted exec settled after ${Date.now() - t0} ms`);
    const t1 = Date.now();
    await client.ping({ timeout: 1000 });
    assert(Date.now() - t1 < 1000, `ping after the cancel took ${Date.now() - t1} ms`);
  });

  await check('the cancelled wait left the operation running on the server', async () => {
    const sc = expectOk('operation_get', await callTool(client, 'operation_get', { operation_id: stuckOp }));
    assert(!TERMINAL.has(sc.operation.state), `the create became ${sc.operation.state} after the client cancelled a wait`);
  });

  // ---- errors as tool results

  await check('isError policy_denied: untrusted repository with open network', async () => {
    const res = await callTool(client, 'sandbox_create', {
      image: IMAGE, cpu_millis: 100, memory_mib: 64, network: 'open', untrusted_repo: true, wait: true, timeout_seconds: 60,
    });
    if (!res.isError && res.structuredContent?.sandbox?.id) {
      const id = res.structuredContent.sandbox.id;
      cleanups.push(async () => callTool(client, 'sandbox_delete', { sandbox_id: id }, { timeout: 10000 }));
    }
    const err = expectErr('sandbox_create', res, 'policy_denied');
    return err.message;
  });

  // No worker offers microvm: the create operation fails at placement, and
  // both ways of waiting for it must say so as a tool error.
  const microvm = { image: IMAGE, cpu_millis: 100, memory_mib: 64, isolation: 'microvm', labels: { suite: 'mcp-microvm' } };
  await check('isError isolation_unavailable: sandbox_create wait=true whose operation fails', async () => {
    const err = expectErr('sandbox_create', await callTool(client, 'sandbox_create', { ...microvm, wait: true, timeout_seconds: 60 }),
      'isolation_unavailable');
    return err.message;
  });

  await check('isError isolation_unavailable: sandbox_wait on a failed operation', async () => {
    const sc = expectOk('sandbox_create', await callTool(client, 'sandbox_create', microvm));
    const err = expectErr('sandbox_wait', await callTool(client, 'sandbox_wait', { operation_id: sc.operation.id, timeout_seconds: 60 }),
      'isolation_unavailable');
    const op = expectOk('operation_get', await callTool(client, 'operation_get', { operation_id: sc.operation.id }));
    eq(op.operation.state, 'failed', 'state of the failed create');
    eq(op.operation.error && op.operation.error.code, 'isolation_unavailable', 'operation.error.code');
    return err.message;
  });

  await check('the failed sandboxes can be deleted', async () => {
    const list = expectOk('sandbox_list', await callTool(client, 'sandbox_list', { limit: 100 }));
    const failed = list.sandboxes.filter((x) => x.labels && x.labels.suite === 'mcp-microvm');
    eq(failed.length, 2, 'sandboxes labelled suite=mcp-microvm');
    for (const f of failed) {
      const d = expectOk('sandbox_delete', await callTool(client, 'sandbox_delete', { sandbox_id: f.id, wait: true, timeout_seconds: 60 }));
      eq(d.operation.state, 'succeeded', `delete of failed sandbox ${f.id} (error: ${show(d.operation.error)})`);
    }
  });

  await check('isError not_found: sandbox_get on a missing sandbox', async () => {
    const err = expectErr('sandbox_get', await callTool(client, 'sandbox_get', { sandbox_id: 'sbx_doesnotexist000000000000' }), 'not_found');
    return err.message;
  });

  await check('isError not_found: operation_get and sandbox_wait on a missing operation', async () => {
    expectErr('operation_get', await callTool(client, 'operation_get', { operation_id: 'op_doesnotexist000000000000' }), 'not_found');
    expectErr('sandbox_wait', await callTool(client, 'sandbox_wait', { operation_id: 'op_doesnotexist000000000000', timeout_seconds: 5 }), 'not_found');
  });

  // ---- raw JSON-RPC over a second process

  const raw = new RawServer('sandbox-mcp (raw)', { env: rawEnv() });

  await check('raw: initialize 2024-11-05 answers 2024-11-05', async () => {
    const r = await raw.initialize('2024-11-05');
    eq(r.protocolVersion, '2024-11-05', 'protocolVersion');
    assert(r.capabilities && r.capabilities.tools && r.capabilities.logging, `capabilities: ${show(r.capabilities)}`);
    raw.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  });

  await check('raw: a malformed line gets -32700 with id null', async () => {
    raw.sendLine('{"jsonrpc":"2.0","id":2,"method":');
    const m = await raw.next((x) => x.error && x.error.code === -32700, 3000, 'parse error');
    assert('id' in m && m.id === null, `id of the parse error: ${show(m)}`);
    eq(m.jsonrpc, '2.0', 'jsonrpc');
  });

  await check('raw: valid JSON that is not a request gets -32600', async () => {
    raw.sendLine('42');
    const m = await raw.next((x) => x.error && x.error.code === -32600, 3000, 'invalid request');
    assert('id' in m && m.id === null, `id of the invalid-request error: ${show(m)}`);
  });

  await check('raw: unknown methods get -32601 with their id', async () => {
    raw.send({ jsonrpc: '2.0', id: 7, method: 'server/discover' });
    const m = await raw.response(7, 3000, 'server/discover');
    eq(m.error && m.error.code, -32601, `error.code for server/discover (${show(m)})`);
    raw.send({ jsonrpc: '2.0', id: 8, method: 'resources/list', params: {} });
    const r = await raw.response(8, 3000, 'resources/list');
    eq(r.error && r.error.code, -32601, `error.code for resources/list (${show(r)})`);
  });

  await check('raw: ping still answers', async () => {
    raw.send({ jsonrpc: '2.0', id: 9, method: 'ping' });
    const m = await raw.response(9, 2000, 'ping');
    eq(m.result, {}, 'ping result');
  });

  await check('raw: tools/call then notifications/cancelled: no response, ping answers', async () => {
    raw.send({
      jsonrpc: '2.0', id: 10, method: 'tools/call',
      params: { name: 'sandbox_wait', arguments: { operation_id: stuckOp, timeout_seconds: 60 }, _meta: { progressToken: 'raw-p' } },
    });
    await raw.next((x) => x.method === 'notifications/progress' && x.params?.progressToken === 'raw-p', 3000,
      'a progress notification carrying the string progressToken');
    raw.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 10, reason: 'raw test' } });
    const t0 = Date.now();
    raw.send({ jsonrpc: '2.0', id: 11, method: 'ping' });
    await raw.response(11, 1000, 'ping after the cancel');
    assert(Date.now() - t0 < 1000, `ping after the cancel took ${Date.now() - t0} ms`);
    await sleep(1500);
    const answered = raw.messages.find((x) => x.id === 10);
    assert(!answered, `the cancelled request was answered: ${show(answered)}`);
    raw.messages = raw.messages.filter((x) => x.method !== 'notifications/progress' && x.method !== 'notifications/message');
  });

  await check('raw: stdout carried only JSON-RPC 2.0 messages', async () => {
    eq(raw.badLines, [], 'stdout lines that are not JSON');
    eq(raw.notRpc, [], 'messages without jsonrpc "2.0"');
  });

  await check('raw: closing stdin ends the process with status 0 within 5 s', async () => {
    const r = await raw.closeStdin(5000);
    eq({ code: r.code, signal: r.signal }, { code: 0, signal: null }, 'exit status');
    return `${r.ms} ms`;
  });

  await check('raw: protocol version negotiation', async () => {
    const answers = [];
    for (const [asked, want] of [[LATEST, LATEST], ['2025-06-18', '2025-06-18'], ['2025-03-26', '2025-03-26'], ['1999-01-01', LATEST]]) {
      const s = new RawServer(`sandbox-mcp (raw ${asked})`, { env: rawEnv() });
      const r = await s.initialize(asked);
      eq(r.protocolVersion, want, `protocolVersion answered to ${asked}`);
      const e = await s.closeStdin(5000);
      eq(e.code, 0, `exit status after initialize ${asked}`);
      answers.push(`${asked}→${r.protocolVersion}`);
    }
    return answers.join(', ');
  });

  // ---- configuration sources and the missing token

  await check('no token: tools/list works, a tool call is isError unauthenticated naming SANDBOX_TOKEN', async () => {
    const c = await connect('sandbox-mcp (no token)', { env: { SANDBOX_URL: URL, XDG_CONFIG_HOME: isolatedConfigDir() } });
    const { tools } = await c.client.listTools(undefined, { timeout: 5000 });
    for (const name of Object.keys(TOOLS)) {
      assert(tools.some((t) => t.name === name), `tool ${name} missing without a token`);
    }
    const err = expectErr('sandbox_list', await c.client.callTool({ name: 'sandbox_list', arguments: {} }, undefined, { timeout: 10000 }), 'unauthenticated');
    assert(err.message.includes('SANDBOX_TOKEN'), `the message does not say how to set SANDBOX_TOKEN: ${err.message}`);
    await c.client.close();
    return err.message;
  });

  await check('--url/--token/--log-level flags win over the environment', async () => {
    const c = await connect('sandbox-mcp (flags)', {
      env: { SANDBOX_URL: 'http://127.0.0.1:9', SANDBOX_TOKEN: 'sbt_not_a_valid_token', XDG_CONFIG_HOME: isolatedConfigDir() },
      args: ['--url', URL, '--token', TOKEN, '--log-level', 'debug'],
    });
    const sc = expectOk('sandbox_list', await c.client.callTool({ name: 'sandbox_list', arguments: {} }, undefined, { timeout: 10000 }));
    assert(sc.sandboxes.some((s) => s.id === sbx), `${sbx} not listed through the flags' URL and token`);
    await c.client.close();
  });

  await check('the CLI config file supplies url and token', async () => {
    const dir = isolatedConfigDir();
    mkdirSync(join(dir, 'sandbox'));
    writeFileSync(join(dir, 'sandbox', 'config'), `# written by tests/mcp/client.mjs\nurl = ${URL}\ntoken = ${TOKEN}\n`, { mode: 0o600 });
    const c = await connect('sandbox-mcp (config file)', { env: { XDG_CONFIG_HOME: dir } });
    const sc = expectOk('sandbox_list', await c.client.callTool({ name: 'sandbox_list', arguments: {} }, undefined, { timeout: 10000 }));
    assert(sc.sandboxes.some((s) => s.id === sbx), `${sbx} not listed through the config file's URL and token`);
    await c.client.close();
  });

  // ---- volumes: one sandbox writes, a read-only one reads, then the volume goes

  await check('volumes: sandbox_volume_create, mounted by sandbox_create, outlives it, sandbox_volume_delete', async () => {
    const name = `mcp-vol-${process.pid}`;
    const made = expectOk('sandbox_volume_create', await callTool(client, 'sandbox_volume_create', { name, size_mib: 16 }));
    const vol = made.volume.id;
    assert(/^vol_/.test(vol) && made.volume.state === 'unplaced', `a new volume: ${show(made.volume)}`);
    cleanups.push(async () => callTool(client, 'sandbox_volume_delete', { volume: vol }, { timeout: 10000 }));
    const small = { image: IMAGE, cpu_millis: 100, memory_mib: 64, ttl_seconds: 300, wait: true, timeout_seconds: 120 };
    const run = async (read_only) => {
      const sc = expectOk('sandbox_create', await callTool(client, 'sandbox_create',
        { ...small, volumes: [{ volume: name, path: '/data', read_only }] }));
      const id = sc.sandbox.id;
      cleanups.push(async () => callTool(client, 'sandbox_delete', { sandbox_id: id, wait: true }, { timeout: 30000 }));
      eq(sc.operation.state, 'succeeded', `create with a ${read_only ? 'read-only' : 'read-write'} mount`);
      eq(sc.sandbox.volumes?.[0]?.volume, vol, 'the sandbox shows its mount by volume id');
      return id;
    };
    const a = await run(false);
    const w = expectOk('sandbox_exec', await callTool(client, 'sandbox_exec',
      { sandbox_id: a, argv: ['sh', '-c', `echo ${name} > /data/note && sync`], timeout_seconds: 30 }));
    eq(w.exit_code, 0, `writing in the volume (stderr ${show(w.stderr)})`);
    expectErr('sandbox_volume_delete', await callTool(client, 'sandbox_volume_delete', { volume: name }), 'conflict');
    expectOk('sandbox_delete', await callTool(client, 'sandbox_delete', { sandbox_id: a, wait: true, timeout_seconds: 60 }));
    const b = await run(true);
    const r = expectOk('sandbox_read_file', await callTool(client, 'sandbox_read_file', { sandbox_id: b, path: '/data/note' }));
    eq(r.content, `${name}\n`, 'the file the first sandbox wrote, read through a read-only mount');
    expectOk('sandbox_delete', await callTool(client, 'sandbox_delete', { sandbox_id: b, wait: true, timeout_seconds: 60 }));
    const list = expectOk('sandbox_volumes', await callTool(client, 'sandbox_volumes', {}));
    const listed = list.volumes.find((v) => v.id === vol);
    assert(listed && listed.state === 'ready' && listed.mounted_by.length === 0, `the listed volume: ${show(listed)}`);
    const gone = expectOk('sandbox_volume_delete', await callTool(client, 'sandbox_volume_delete', { volume: name }));
    eq(gone.volume.state, 'deleted', 'the deleted volume\'s state');
    const after = expectOk('sandbox_volumes', await callTool(client, 'sandbox_volumes', {}));
    assert(!after.volumes.some((v) => v.id === vol), `deleted ${vol} still listed`);
    return `${vol} on ${listed.worker}`;
  });

  // ---- a template version the server builds from exec steps

  await check('templates: sandbox_template_build runs the steps, makes a version; a failing step is an error', async () => {
    const template = `mcp-tpl-${process.pid}`;
    const sandbox = { image: IMAGE, cpu_millis: 100, memory_mib: 64 };
    const built = expectOk('sandbox_template_build', await callTool(client, 'sandbox_template_build', {
      template, sandbox, steps: [{ argv: ['sh', '-c', 'echo $WORD > /built.txt'], env: { WORD: template } }],
      config: { workdir: '/' }, timeout_seconds: 120 }));
    eq(built.build.state, 'ready', `the build's state (${show(built.build)})`);
    eq(built.build.version, 1, 'the first version');
    const again = expectOk('sandbox_template_build', await callTool(client, 'sandbox_template_build',
      { template, build_id: built.build.id, wait: false }));
    eq(again.build.id, built.build.id, 'build_id reads that build');
    const sc = expectOk('sandbox_create', await callTool(client, 'sandbox_create',
      { template, cpu_millis: 100, memory_mib: 64, ttl_seconds: 300, wait: true, timeout_seconds: 120 }));
    const id = sc.sandbox.id;
    cleanups.push(async () => callTool(client, 'sandbox_delete', { sandbox_id: id, wait: true }, { timeout: 30000 }));
    const r = expectOk('sandbox_read_file', await callTool(client, 'sandbox_read_file', { sandbox_id: id, path: '/built.txt' }));
    eq(r.content, `${template}\n`, 'the file the build step wrote');
    expectOk('sandbox_delete', await callTool(client, 'sandbox_delete', { sandbox_id: id, wait: true, timeout_seconds: 60 }));
    const bad = await callTool(client, 'sandbox_template_build', {
      template, sandbox, steps: [{ argv: ['sh', '-c', 'exit 4'] }], timeout_seconds: 120 });
    expectErr('sandbox_template_build', bad, 'build_failed');
    assert(textBlocks(bad).join(' ').includes('exited with 4'), `the failed build's message: ${show(textBlocks(bad))}`);
    // the build sandboxes go by themselves (the failed build's too)
    const failedId = (textBlocks(bad).join(' ').match(/bld_[a-z2-7]{26}/) || [])[0];
    assert(failedId, `the failed build's message names it: ${show(textBlocks(bad))}`);
    const failed = expectOk('sandbox_template_build', await callTool(client, 'sandbox_template_build',
      { template, build_id: failedId, wait: false }));
    eq(failed.build.state, 'failed', 'the failed build read by its id');
    for (const sid of [built.build.sandbox_id, failed.build.sandbox_id]) {
      for (let i = 0; ; i++) {
        const g = await callTool(client, 'sandbox_get', { sandbox_id: sid });
        if (!g.isError && g.structuredContent.sandbox.phase === 'deleted') break;
        assert(i < 120, `build sandbox ${sid} not deleted: ${show(g.structuredContent || textBlocks(g))}`);
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    // a build under way cancelled by its id; its sandbox goes too
    const slow = expectOk('sandbox_template_build', await callTool(client, 'sandbox_template_build', {
      template, sandbox, steps: [{ argv: ['sleep', '60'] }], wait: false }));
    const noId = await callTool(client, 'sandbox_template_build', { template, cancel: true });
    expectErr('sandbox_template_build', noId, 'invalid_argument');
    const cancelled = expectOk('sandbox_template_build', await callTool(client, 'sandbox_template_build',
      { template, build_id: slow.build.id, cancel: true }));
    eq(cancelled.build.state, 'cancelled', `the cancelled build (${show(cancelled.build)})`);
    const reread = expectOk('sandbox_template_build', await callTool(client, 'sandbox_template_build',
      { template, build_id: slow.build.id, wait: false }));
    eq(reread.build.state, 'cancelled', 'the cancelled build read again');
    // the version it made copied nowhere: no such worker, said by name
    const copy = await callTool(client, 'sandbox_snapshot_copy',
      { snapshot_id: built.build.snapshot_id, worker: 'no-such-worker' });
    expectErr('sandbox_snapshot_copy', copy, 'not_found');
    assert(textBlocks(copy).join(' ').includes('no-such-worker'), `the copy's error: ${show(textBlocks(copy))}`);
    const list = expectOk('sandbox_templates', await callTool(client, 'sandbox_templates', {}));
    const t = list.templates.find((x) => x.name === template);
    assert(t && t.versions === 1, `the template after a failed and a cancelled build: ${show(t)}`);
    return `${template} v1 (${built.build.id}), ${slow.build.id} cancelled`;
  });

  // ---- deletion

  await check('sandbox_delete wait=true on the unplaced sandbox', async () => {
    const sc = expectOk('sandbox_delete', await callTool(client, 'sandbox_delete', { sandbox_id: stuck, wait: true, timeout_seconds: 60 }));
    eq(sc.operation.state, 'succeeded', `delete operation state (error: ${show(sc.operation.error)})`);
  });

  await check('sandbox_delete wait=true, then sandbox_get shows phase deleted', async () => {
    const sc = expectOk('sandbox_delete', await callTool(client, 'sandbox_delete',
      { sandbox_id: sbx, wait: true, timeout_seconds: 60, idempotency_key: `mcp-test-${sbx}` }));
    eq(sc.operation.kind, 'delete', 'operation.kind');
    eq(sc.operation.state, 'succeeded', `delete operation state (error: ${show(sc.operation.error)})`);
    const got = expectOk('sandbox_get', await callTool(client, 'sandbox_get', { sandbox_id: sbx }));
    eq(got.sandbox.phase, 'deleted', 'sandbox.phase after the delete');
  });

  await check('sandbox_extend isError conflict: the deleted sandbox', async () => {
    const err = expectErr('sandbox_extend', await callTool(client, 'sandbox_extend', { sandbox_id: sbx, ttl_seconds: 600 }), 'conflict');
    assert(err.message.includes('deleted'), `the conflict does not say the sandbox is deleted: ${err.message}`);
  });

  await check('the routes went with the sandbox', async () => {
    const live = expectOk('sandbox_routes', await callTool(client, 'sandbox_routes', { sandbox_id: sbx }));
    eq(live.routes, [], 'active routes of the deleted sandbox');
    const all = expectOk('sandbox_routes', await callTool(client, 'sandbox_routes', { sandbox_id: sbx, all: true }));
    const pub = all.routes.find((r) => r.id === publicRoute.id);
    assert(pub && pub.state === 'removed', `public route ${publicRoute.id} after the delete: ${show(pub)}`);
  });

  await check('sandbox_list hides the deleted sandbox unless all=true', async () => {
    const live = expectOk('sandbox_list', await callTool(client, 'sandbox_list', { limit: 100 }));
    assert(!live.sandboxes.some((s) => s.id === sbx), `deleted ${sbx} still listed without all`);
    const all = expectOk('sandbox_list', await callTool(client, 'sandbox_list', { all: true, limit: 100 }));
    assert(all.sandboxes.some((s) => s.id === sbx), `deleted ${sbx} not listed with all=true`);
  });

  await check('the SDK client saw only well-formed JSON-RPC', async () => {
    eq(primary.rec.sdkErrors, [], 'errors reported by the SDK transport');
  });

  await check('closing the SDK client ends sandbox-mcp with status 0', async () => {
    const proc = primary.transport._process;
    const exited = new Promise((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) resolve({ code: proc.exitCode, signal: proc.signalCode });
      else proc.on('exit', (code, signal) => resolve({ code, signal }));
    });
    proc.stdin.end();
    const r = await Promise.race([exited, sleep(5000).then(() => null)]);
    assert(r, 'sandbox-mcp still running 5 s after its stdin closed');
    eq(r, { code: 0, signal: null }, 'exit status');
  });

  await runCleanups(); // the sandboxes are gone already; this closes clients and removes temp folders
  console.log(`sandbox-mcp: ${passed} checks passed`);
}

main().catch(async (e) => {
  console.log(`FAIL unexpected: ${e?.stack || e}`);
  await runCleanups();
  process.exit(1);
});
