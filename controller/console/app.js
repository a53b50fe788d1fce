// The Sandbox web console (docs/console.md). One module, no build step, no
// dependency: it reads the API (/v1) with the token its user signs in with.
// The token lives in this tab's sessionStorage and goes out only as an
// Authorization header to this origin: never in a URL (the hash holds view
// names, ids and filters), a cookie or a log. Every text the API returns is
// put in the page as text (textContent), never as markup.

const TOKEN_KEY = 'sandbox.console.token';
// The API's prefix: the console is served at PREFIX/console/ (a proxy may
// add a path prefix; docs/console.md).
const BASE = location.pathname.replace(/\/console(\/.*)?$/, '');
const PHASES = ['pending', 'scheduled', 'provisioning', 'running', 'paused', 'deleting', 'deleted', 'failed', 'lost'];

const state = { token: sessionStorage.getItem(TOKEN_KEY), admin: false, tenant: '', version: '' };
let viewAbort = null;

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// ---- small helpers

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

function svg(tag, attrs) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

const $ = (id) => document.getElementById(id);
// el's children become kids (null, undefined and false left out)
const put = (el, ...kids) =>
  el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

function ago(ts) {
  if (!ts) return '—';
  const s = Math.round((Date.now() - Date.parse(ts)) / 1000);
  if (Number.isNaN(s)) return ts;
  if (s < 0) return 'in ' + dur(-s);
  return dur(s) + ' ago';
}

function dur(s) {
  if (s < 90) return s + ' s';
  if (s < 5400) return Math.round(s / 60) + ' min';
  if (s < 172800) return Math.round(s / 3600) + ' h';
  return Math.round(s / 86400) + ' d';
}

function badge(text) {
  return h('span', { class: 'phase ' + String(text || '').replace(/[^a-z_]/g, '') }, text || '—');
}

function kv(pairs) {
  const dl = h('dl', { class: 'kv' });
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === '') continue;
    dl.append(h('dt', {}, k), h('dd', {}, v));
  }
  return dl;
}

function table(headers, rows, onRow) {
  const tbody = h('tbody');
  for (const r of rows) {
    const tr = h('tr', onRow ? { class: 'clickable', onclick: () => onRow(r.item) } : {},
      r.cells.map((c) => h('td', {}, c)));
    if (r.id) tr.dataset.id = r.id;
    tbody.append(tr);
  }
  return h('table', {}, h('thead', {}, h('tr', {}, headers.map((t) => h('th', {}, t)))), tbody);
}

function json(o) {
  return h('pre', { class: 'json' }, JSON.stringify(o, null, 2));
}

function status(text, bad) {
  const s = $('status');
  s.textContent = text;
  s.className = bad ? 'error' : '';
}

function meter(used, total) {
  const u = Number(used) || 0, t = Number(total) || 0;
  return h('span', { class: 'bar' },
    h('meter', { min: 0, max: t || 1, value: Math.min(u, t || 1), low: t * 0.7, high: t * 0.9, optimum: 0 }),
    h('span', { class: 'muted' }, `${u} / ${t}`));
}

// ---- the API

// fetch of this origin's PATH with the token as its only credential: the
// answer when it is 2xx, else an ApiError from its error body.
async function apiFetch(method, path, body, signal) {
  const headers = { Authorization: 'Bearer ' + state.token };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(BASE + path, {
    method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer',
  });
  if (r.ok) return r;
  let doc = null;
  try { doc = await r.json(); } catch { doc = null; }
  throw new ApiError(r.status, doc?.error?.code || 'http_' + r.status, doc?.error?.message || r.statusText);
}

async function api(method, path, body, signal) {
  let r;
  try {
    r = await apiFetch(method, path, body, signal);
  } catch (e) {
    if (e.status === 401 && state.token) signOut('The server no longer takes this token (401): sign in again.');
    throw e;
  }
  try { return await r.json(); } catch { return null; }
}

// A streamed answer of JSON lines (application/x-ndjson): onLine for each.
async function streamLines(path, signal, onLine) {
  const r = await apiFetch('GET', path, undefined, signal);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim()) onLine(JSON.parse(line));
    }
  }
}

// Events from now on (query: "&sandbox=…" and such), by long polls, until
// signal: onEvents(events) for each batch.
async function followEvents(query, signal, onEvents, after) {
  while (after === undefined && !signal.aborted) {
    try {
      after = (await api('GET', '/v1/events?tail=1' + query, undefined, signal)).next_after;
    } catch (e) {
      if (signal.aborted) return;
      status('events: ' + e.message, true);
      await sleep(3000, signal);
    }
  }
  while (!signal.aborted) {
    try {
      const d = await api('GET', `/v1/events?after=${after}&wait=25&limit=200${query}`, undefined, signal);
      after = d.next_after;
      if (d.events.length) onEvents(d.events);
    } catch (e) {
      if (signal.aborted) return;
      status('events: ' + e.message, true);
      await sleep(3000, signal);
    }
  }
}

// fn now and every ms until signal.
function every(ms, fn, signal) {
  const t = setInterval(() => {
    if (!document.hidden) fn().catch((e) => { if (e.name !== 'AbortError') status(e.message, true); });
  }, ms);
  signal.addEventListener('abort', () => clearInterval(t), { once: true });
}

// At most one fn at a time, and once more after one asked while it ran;
// an error says so in the status line. first() runs fn once and throws
// what it throws (a view's first load: its error is the view's).
function debounced(fn) {
  let running = false, again = false;
  const run = async function run() {
    if (running) { again = true; return; }
    running = true;
    try { await fn(); } catch (e) { if (e.name !== 'AbortError') status(e.message, true); }
    running = false;
    if (again) { again = false; run(); }
  };
  run.first = async () => {
    running = true;
    try { await fn(); } finally { running = false; }
    if (again) { again = false; run(); }
  };
  return run;
}

// Asks first; a refusal or an error says so. Every action is recorded by
// the server as the CLI's is (events, the access log).
async function act(question, doit, after) {
  if (!window.confirm(question)) return;
  try {
    await doit();
    status('done: ' + question.replace(/\?$/, ''));
    if (after) await after();
  } catch (e) {
    status(`${e.code || 'error'}: ${e.message}`, true);
    window.alert(`${e.code || 'error'}: ${e.message}`);
  }
}

// ---- sign-in

async function whoami() {
  const v = await api('GET', '/v1/version');
  state.version = v.version || '';
  try {
    await api('GET', '/v1/workers');
    state.admin = true;
  } catch (e) {
    if (e.status !== 403) throw e;
    state.admin = false;
  }
  try {
    const t = await api('GET', '/v1/tenants');
    state.tenant = state.admin ? '' : (t.tenants?.[0]?.name || '');
  } catch { state.tenant = ''; }
}

function signOut(why) {
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  if (viewAbort) viewAbort.abort();
  $('top').hidden = true;
  put($('main'));
  $('signin').hidden = false;
  $('signin-error').textContent = why || '';
  $('token').focus();
}

async function signIn(ev) {
  ev.preventDefault();
  const input = $('token');
  const token = input.value.trim();
  input.value = '';
  if (!token) return;
  state.token = token;
  try {
    await whoami();
  } catch (e) {
    state.token = null;
    $('signin-error').textContent = e.status === 401 ? 'The server does not know this token.'
      : e.status === 403 ? 'This token cannot read the API (a worker token?): use an admin or member token.'
        : 'Sign-in failed: ' + e.message;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  start();
}

function start() {
  $('signin').hidden = true;
  $('top').hidden = false;
  $('who').textContent = (state.admin ? 'admin' : 'member of ' + state.tenant) +
    (state.version ? ' · ' + state.version : '');
  for (const a of document.querySelectorAll('.admin-only')) a.hidden = !state.admin;
  render();
}

// ---- views

const views = {
  '': viewOverview, sandboxes: viewSandboxes, sandbox: viewSandbox, events: viewEvents, tenants: viewTenants,
  tokens: viewTokens,
};

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query] = raw.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { name: parts[0] || '', arg: parts[1], params: new URLSearchParams(query || '') };
}

async function render() {
  if (!state.token) return;
  if (viewAbort) viewAbort.abort();
  viewAbort = new AbortController();
  const signal = viewAbort.signal;
  const { name, arg, params } = parseHash();
  const view = views[name] || viewOverview;
  for (const a of document.querySelectorAll('header nav a')) {
    a.classList.toggle('current', a.dataset.view === (name === 'sandbox' ? 'sandboxes' : name || 'overview'));
  }
  const main = $('main');
  put(main, h('p', { class: 'muted' }, 'loading…'));
  status('');
  try {
    await view(main, signal, arg, params);
  } catch (e) {
    if (signal.aborted) return;
    put(main, h('h1', {}, 'Error'), h('p', { class: 'error' }, `${e.code || 'error'}: ${e.message}`));
  }
}

// Overview: workers, sandboxes by phase, operations, pools.
async function viewOverview(main, signal) {
  const phases = h('section', { class: 'panel' });
  const ops = h('section', { class: 'panel' });
  const workers = h('div');
  const pools = h('div');
  put(main, h('h1', {}, 'Overview'), h('div', { class: 'grid' }, phases, ops),
    state.admin ? h('h2', {}, 'Workers') : null, workers, h('h2', {}, 'Warm pools'), pools);
  async function load() {
    const [list, events, poolList, workerList] = await Promise.all([
      api('GET', '/v1/sandboxes?limit=1000', undefined, signal),
      api('GET', '/v1/events?tail=1000', undefined, signal),
      api('GET', '/v1/pools', undefined, signal).catch(() => ({ pools: [] })),
      state.admin ? api('GET', '/v1/workers', undefined, signal) : null,
    ]);
    const by = {};
    for (const s of list.sandboxes) by[s.phase] = (by[s.phase] || 0) + 1;
    put(phases, h('h2', {}, 'Sandboxes by phase'),
      h('div', { class: 'stats', id: 'phase-counts' }, PHASES.filter((p) => p !== 'deleted').map((p) =>
        h('div', { 'data-phase': p }, h('span', {}, p), h('b', { class: 'stat' }, by[p] || 0)))),
      h('p', { class: 'hint' }, `of the newest ${list.sandboxes.length} not deleted`));
    put(ops, h('h2', {}, 'Operations, last 30 minutes'), sparkline(events.events));
    if (workerList) put(workers, workerTable(workerList.workers, load));
    put(pools, poolList.pools.length ? table(['Pool', 'Tenant', 'Image', 'Ready', 'Size'],
      poolList.pools.map((p) => ({
        cells: [p.name || p.id, p.tenant, p.image || p.spec?.image, p.ready ?? p.members ?? '—', p.size ?? '—'],
      }))) : h('p', { class: 'muted' }, 'No warm pools.'));
    status('updated ' + new Date().toLocaleTimeString());
  }
  await load();
  every(5000, load, signal);
}

// A per-minute line of finished operations (and failed ones) over 30 min.
function sparkline(events) {
  const now = Date.now(), n = 30, done = new Array(n).fill(0), failed = new Array(n).fill(0);
  const failures = [];
  for (const e of events) {
    if (e.kind !== 'operation.succeeded' && e.kind !== 'operation.failed') continue;
    const m = Math.floor((now - Date.parse(e.ts)) / 60000);
    if (m < 0 || m >= n) continue;
    done[n - 1 - m]++;
    if (e.kind === 'operation.failed') {
      failed[n - 1 - m]++;
      failures.push(e);
    }
  }
  const max = Math.max(1, ...done);
  const pts = (a) => a.map((v, i) => `${(i / (n - 1)) * 300},${54 - (v / max) * 50}`).join(' ');
  const chart = svg('svg', { class: 'spark', viewBox: '0 0 300 56', preserveAspectRatio: 'none', role: 'img' });
  chart.append(svg('polyline', { points: pts(done) }), svg('polyline', { points: pts(failed), class: 'failed' }));
  const total = done.reduce((a, b) => a + b, 0), bad = failed.reduce((a, b) => a + b, 0);
  return h('div', {}, chart,
    h('p', { id: 'ops-summary' }, `${total} finished, `, h('span', { class: bad ? 'error' : '' }, `${bad} failed`),
      h('span', { class: 'muted' }, ` (busiest minute ${max})`)),
    failures.slice(-5).reverse().map((e) => h('div', { class: 'hint' }, `${ago(e.ts)}: `,
      h('a', { href: '#/sandbox/' + encodeURIComponent(e.sandbox_id || '') }, e.sandbox_id || ''), ' ',
      e.data?.kind || '', ' ', e.data?.error?.code || '', ' ', e.data?.error?.message || '')));
}

function workerTable(list, reload) {
  return table(['Worker', 'State', 'Classes', 'CPU (millis)', 'Memory (MiB)', 'Slots', 'Heartbeat', ''],
    list.map((w) => ({
      id: w.name,
      cells: [
        h('span', {}, h('b', {}, w.name), h('div', { class: 'hint' }, w.version || '')),
        h('span', {}, badge(w.state), w.stopping ? h('div', { class: 'hint' }, 'stopping') : null,
          w.unreachable ? h('div', { class: 'hint' }, w.unreachable.reason) : null),
        h('div', {}, (w.isolation || []).map((c) => h('div', {},
          h('b', {}, c), ' ', h('span', { class: 'muted' }, (w.networks?.[c] || ['none']).join(', ')),
          w.probes?.[c] ? h('div', { class: 'hint' }, w.probes[c]) : null))),
        meter(w.allocated?.cpu_millis, w.capacity?.cpu_millis),
        meter(w.allocated?.memory_mib, w.capacity?.memory_mib),
        meter(w.allocated?.slots, w.capacity?.slots),
        ago(w.last_heartbeat),
        w.state === 'draining'
          ? h('button', { type: 'button', onclick: () => act(`Resume worker ${w.name}?`,
            () => api('POST', `/v1/workers/${encodeURIComponent(w.name)}/resume`), reload) }, 'Resume')
          : w.state === 'ready'
            ? h('button', { type: 'button', onclick: () => act(`Drain worker ${w.name}? Nothing new is placed on it.`,
              () => api('POST', `/v1/workers/${encodeURIComponent(w.name)}/drain`), reload) }, 'Drain')
            : '',
      ],
    })));
}

// A filter form: submitting it opens VIEW with its non-empty fields as the
// hash's query.
function filtersTo(form, view) {
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
    location.hash = `#/${view}` + (q.toString() ? '?' + q : '');
  });
  return form;
}

// Sandboxes: filters, keyset pages, live.
async function viewSandboxes(main, signal, _arg, params) {
  const f = (k) => params.get(k) || '';
  const form = h('form', { class: 'filters', id: 'sandbox-filters' },
    state.admin ? h('label', {}, 'Tenant', h('input', { name: 'tenant', value: f('tenant'), size: 12 })) : null,
    h('label', {}, 'Phase', h('select', { name: 'phase' }, h('option', { value: '' }, 'any (not deleted)'),
      PHASES.map((p) => h('option', { value: p, selected: f('phase') === p }, p)))),
    h('label', {}, 'Label', h('input', { name: 'label', value: f('label'), placeholder: 'k=v', size: 12 })),
    h('label', {}, 'Worker', h('input', { name: 'worker', value: f('worker'), size: 12 })),
    h('label', {}, 'Image', h('input', { name: 'image', value: f('image'), size: 16 })),
    h('button', { type: 'submit' }, 'Filter'));
  filtersTo(form, 'sandboxes');
  const list = h('div', { id: 'sandbox-list' });
  const pager = h('div', { class: 'pager' });
  put(main, h('h1', {}, 'Sandboxes'), form, list, pager,
    h('p', { class: 'hint' }, 'Worker and image filter the page shown; the list follows changes as they happen.'));
  const load = debounced(async () => {
    const q = new URLSearchParams({ limit: '50' });
    for (const k of ['tenant', 'phase', 'label', 'after']) if (f(k)) q.set(k, f(k));
    const d = await api('GET', '/v1/sandboxes?' + q, undefined, signal);
    const shown = d.sandboxes.filter((s) => (!f('worker') || s.worker === f('worker')) &&
      (!f('image') || String(s.image).includes(f('image'))));
    put(list, shown.length ? table(['Sandbox', 'Tenant', 'Phase', 'Isolation', 'Image', 'Worker', 'Created'],
      shown.map((s) => ({
        id: s.id, item: s,
        cells: [h('span', {}, h('b', {}, s.name || s.id), s.name ? h('div', { class: 'hint mono' }, s.id) : null),
          s.tenant, h('span', {}, badge(s.phase), s.failure ? h('div', { class: 'hint error' }, s.failure.reason) : null),
          s.isolation, s.image, s.worker || '—', ago(s.created_at)],
      })), (s) => { location.hash = '#/sandbox/' + encodeURIComponent(s.id); })
      : h('p', { class: 'muted' }, 'No sandboxes.'));
    const next = new URLSearchParams(params);
    put(pager, 
      f('after') ? h('a', { href: '#/sandboxes?' + withParam(params, 'after', '') }, 'First page') : null,
      d.next ? h('a', { href: '#/sandboxes?' + (next.set('after', d.next), next) }, 'Next page') : null);
    status('updated ' + new Date().toLocaleTimeString());
  });
  await load.first();
  followEvents('', signal, (evs) => {
    if (evs.some((e) => e.kind.startsWith('sandbox.'))) load();
  });
}

function withParam(params, k, v) {
  const q = new URLSearchParams(params);
  if (v) q.set(k, v); else q.delete(k);
  return q.toString();
}

// One sandbox: what it is, why it runs where, its operations, live log and
// events, routes, files; delete and extend.
async function viewSandbox(main, signal, id) {
  const path = '/v1/sandboxes/' + encodeURIComponent(id);
  const head = h('div'), summary = h('section', { class: 'panel', id: 'summary' });
  const trust = h('section', { class: 'panel' }), placement = h('section', { class: 'panel', id: 'placement' });
  const ops = h('div', { id: 'operations' }), routes = h('div'), spec = h('div');
  const log = h('pre', { class: 'log', id: 'log' });
  const events = h('div', { id: 'sandbox-events' });
  const files = h('div', { id: 'files' });
  put(main, head, h('div', { class: 'grid' }, summary, trust, placement),
    h('h2', {}, 'Operations'), ops, h('h2', {}, 'Log'), log, h('h2', {}, 'Events'), events,
    h('h2', {}, 'Routes'), routes, h('h2', {}, 'Files'), files, h('h2', {}, 'Spec'), spec);
  let phase = null, logStarted = false, filesShown = false;
  // the log once it has a container: followed while it runs
  const startLog = async (live) => {
    logStarted = true;
    try {
      await streamLines(`${path}/logs?tail=200&follow=${live}`, signal, (line) => {
        if (line.data !== undefined) {
          log.append(h('span', { class: line.stream === 'stderr' ? 'stderr' : '' }, line.data));
          log.scrollTop = log.scrollHeight;
        } else if (line.error) {
          log.append(h('span', { class: 'stderr' }, `\n[${line.error.code}: ${line.error.message}]\n`));
        }
      });
      if (!signal.aborted && live) log.append(h('span', { class: 'muted' }, '\n[the log ended]\n'));
    } catch (e) {
      if (!signal.aborted) log.append(h('span', { class: 'muted' }, `[no log: ${e.message}]`));
    }
  };
  const load = debounced(async () => {
    const d = await api('GET', path, undefined, signal);
    const s = d.sandbox;
    phase = s.phase;
    if (!logStarted && !['pending', 'scheduled', 'provisioning'].includes(phase)) startLog(phase === 'running');
    if (!filesShown && phase === 'running') {
      filesShown = true;
      browse(files, path, '/', signal);
    }
    put(head, h('h1', {}, s.name || s.id, ' ', badge(s.phase)),
      h('div', { class: 'actions' },
        h('button', { type: 'button', id: 'extend', onclick: () => extend(s) }, 'Extend…'),
        h('button', { type: 'button', class: 'danger', id: 'delete',
          onclick: () => act(`Delete sandbox ${s.name || s.id}? Its files and processes go.`,
            () => api('DELETE', path), load) }, 'Delete')));
    put(summary, h('h2', {}, 'Summary'), kv([
      ['id', h('span', { class: 'mono' }, s.id)], ['tenant', s.tenant], ['phase', s.phase],
      ['failure', s.failure ? h('span', { class: 'error', id: 'failure' }, `${s.failure.reason}: ${s.failure.message}`) : null],
      ['unreachable', s.unreachable ? `${s.unreachable.reason} since ${ago(s.unreachable.since)}` : null],
      ['worker', s.worker], ['isolation', s.isolation + (s.accelerator ? ` (${s.accelerator})` : '')],
      ['image', s.image], ['network', s.network], ['cpu', s.cpu_millis + ' millis'],
      ['memory', s.memory_mib + ' MiB'], ['disk', s.disk_mib ? s.disk_mib + ' MiB' : 'no quota'],
      ['expires', s.expires_at ? `${s.expires_at} (${ago(s.expires_at)})` : `ttl ${s.ttl_seconds} s once running`],
      ['created', `${s.created_at} (${ago(s.created_at)})`],
    ]));
    const c = s.classification || {};
    put(trust, h('h2', {}, 'Trust and classification'), kv([
      ['trust', c.trust], ['needs', c.isolation], ['hardened', String(!!c.hardened)],
      ['flags', Object.entries(s.trust || {}).filter(([, v]) => v).map(([k]) => k).join(', ') || 'none'],
    ]), h('ul', {}, (c.reasons || []).map((r) => h('li', {}, r))));
    const create = d.operations.find((o) => o.kind === 'create' && o.placement) ||
      d.operations.find((o) => o.placement);
    put(placement, h('h2', {}, 'Placement'), create
      ? h('div', {}, h('p', {}, create.placement.summary),
        h('ul', { class: 'hint' }, (create.placement.reasons || []).map((r) => h('li', {}, r))))
      : h('p', { class: 'muted' }, 'Not placed by an operation this list holds.'));
    put(ops, table(['Operation', 'Kind', 'State', 'Created', 'Finished', 'Error'],
      d.operations.map((o) => ({
        id: o.id,
        cells: [h('span', { class: 'mono' }, o.id), o.kind, badge(o.state), ago(o.created_at),
          o.finished_at ? ago(o.finished_at) : '—', o.error ? `${o.error.code}: ${o.error.message}` : ''],
      }))));
    put(spec, json(s));
    return s;
  });
  async function extend(s) {
    const v = window.prompt(`Extend ${s.name || s.id}: it expires this many seconds from now`, '3600');
    if (v === null) return;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) { window.alert('A whole number of seconds, 1 or more.'); return; }
    await act(`Set ${s.name || s.id} to expire ${n} seconds from now?`,
      () => api('POST', path + '/extend', { ttl_seconds: n }), load);
  }
  await load.first();
  // events: the newest, then live; a change reloads the rest
  const evRows = h('tbody');
  put(events, h('table', {}, h('thead', {}, h('tr', {}, ['Time', 'Kind', 'Operation', 'Data']
    .map((t) => h('th', {}, t)))), evRows));
  const addEvents = (evs) => {
    for (const e of evs) {
      evRows.prepend(h('tr', {}, h('td', {}, ago(e.ts)), h('td', {}, e.kind),
        h('td', { class: 'mono' }, e.operation_id || ''), h('td', { class: 'mono data' }, JSON.stringify(e.data || {}))));
    }
  };
  const first = await api('GET', `/v1/events?tail=50&sandbox=${encodeURIComponent(id)}`, undefined, signal);
  addEvents(first.events);
  followEvents('&sandbox=' + encodeURIComponent(id), signal, (evs) => { addEvents(evs); load(); }, first.next_after);
  api('GET', path + '/routes', undefined, signal).then((d) => put(routes, d.routes.length
    ? table(['Route', 'Port', 'Auth', 'State', 'Expires'], d.routes.map((r) => ({
      cells: [h('a', { href: r.url, rel: 'noreferrer' }, r.url), r.port, r.auth, r.state, ago(r.expires_at)],
    }))) : h('p', { class: 'muted' }, 'No routes.')))
    .catch((e) => put(routes, h('p', { class: 'muted' }, e.message)));
  if (!filesShown) put(files, h('p', { class: 'muted' }, 'Files are read from a running sandbox.'));
}

// A directory of a running sandbox; a file downloads.
async function browse(el, path, dir, signal) {
  put(el, h('p', { class: 'muted' }, 'reading ' + dir + '…'));
  let d;
  try {
    d = await api('GET', `${path}/files?path=${encodeURIComponent(dir)}&format=list`, undefined, signal);
  } catch (e) {
    put(el, h('p', { class: 'error' }, `${dir}: ${e.message}`));
    return;
  }
  const join = (n) => (dir.endsWith('/') ? dir : dir + '/') + n;
  const up = dir === '/' ? null : dir.replace(/\/[^/]+\/?$/, '') || '/';
  put(el, h('p', { class: 'mono', id: 'files-path' }, dir),
    table(['Name', 'Type', 'Size', 'Modified'], [
      ...(up ? [{ item: { name: '..', type: 'dir', up: true }, cells: ['..', 'dir', '', ''] }] : []),
      ...d.entries.map((e) => ({
        item: e, id: e.name,
        cells: [e.name, e.type, e.type === 'dir' ? '' : e.size, e.mtime ? ago(e.mtime) : ''],
      }))], (e) => {
      if (e.up) browse(el, path, up, signal);
      else if (e.type === 'dir') browse(el, path, join(e.name), signal);
      else download(path, join(e.name), e.name);
    }),
    ...(d.truncated ? [h('p', { class: 'hint' }, 'Only the first entries are listed.')] : []));
}

async function download(path, file, name) {
  try {
    const r = await apiFetch('GET', `${path}/files?path=${encodeURIComponent(file)}&format=raw`);
    const url = URL.createObjectURL(await r.blob());
    const a = h('a', { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    status(`${file}: ${e.message}`, true);
  }
}

// Events: a live tail with filters.
async function viewEvents(main, signal, _arg, params) {
  const f = (k) => params.get(k) || '';
  const form = h('form', { class: 'filters' },
    h('label', {}, 'Kind', h('input', { name: 'kind', value: f('kind'), placeholder: 'sandbox.failed', size: 18 })),
    h('label', {}, 'Sandbox', h('input', { name: 'sandbox', value: f('sandbox'), size: 24 })),
    h('button', { type: 'submit' }, 'Filter'));
  filtersTo(form, 'events');
  const rows = h('tbody', { id: 'event-rows' });
  put(main, h('h1', {}, 'Events'), form, h('table', {}, h('thead', {}, h('tr', {},
    ['Id', 'Time', 'Tenant', 'Kind', 'Sandbox', 'Operation', 'Data'].map((t) => h('th', {}, t)))), rows));
  let query = '';
  for (const k of ['kind', 'sandbox']) if (f(k)) query += `&${k}=${encodeURIComponent(f(k))}`;
  const add = (evs) => {
    for (const e of evs) {
      rows.prepend(h('tr', {}, h('td', {}, e.id), h('td', { title: e.ts }, ago(e.ts)), h('td', {}, e.tenant),
        h('td', {}, e.kind),
        h('td', {}, e.sandbox_id ? h('a', { href: '#/sandbox/' + encodeURIComponent(e.sandbox_id) }, e.sandbox_id) : ''),
        h('td', { class: 'mono' }, e.operation_id || ''), h('td', { class: 'mono data' }, JSON.stringify(e.data || {}))));
    }
    while (rows.children.length > 500) rows.lastChild.remove();
  };
  const first = await api('GET', '/v1/events?tail=100' + query, undefined, signal);
  add(first.events);
  followEvents(query, signal, add, first.next_after);
}

// Tenants: each with its policy and usage (a member sees its own).
async function viewTenants(main, signal) {
  const d = await api('GET', '/v1/tenants', undefined, signal);
  put(main, h('h1', {}, 'Tenants'), ...d.tenants.map((t) => h('section', { class: 'panel' },
    h('h2', {}, t.name || t.id), kv(Object.entries(t).filter(([k, v]) => k !== 'policy' && k !== 'usage' &&
      (typeof v !== 'object' || v === null)).map(([k, v]) => [k, String(v)])),
    t.usage ? h('div', {}, h('h2', {}, 'Usage'), json(t.usage)) : null,
    h('h2', {}, 'Policy'), json(t.policy || {}))));
}

// Tokens (admin): never their secrets; revoke.
async function viewTokens(main, signal) {
  if (!state.admin) {
    put(main, h('h1', {}, 'Tokens'), h('p', { class: 'muted' }, 'Listing tokens needs an admin token.'));
    return;
  }
  const load = async () => {
    const d = await api('GET', '/v1/tokens', undefined, signal);
    put(main, h('h1', {}, 'Tokens'), table(['Token', 'Name', 'Tenant', 'Role', 'Created', 'Expires', 'Revoked', ''],
      d.tokens.map((t) => ({
        id: t.id,
        cells: [h('span', { class: 'mono' }, t.id), t.name || (t.worker_name ? 'worker ' + t.worker_name : ''),
          t.tenant, t.role, ago(t.created_at), t.expires_at ? ago(t.expires_at) : 'never',
          t.revoked_at ? badge('revoked') : '',
          t.revoked_at ? '' : h('button', { type: 'button', class: 'danger', onclick: () => act(
            `Revoke token ${t.id} (${t.role} of ${t.tenant})? Whoever holds it is refused from now on.`,
            () => api('DELETE', '/v1/tokens/' + encodeURIComponent(t.id)), load) }, 'Revoke')],
      }))));
  };
  await load();
}

// ---- start

$('signin-form').addEventListener('submit', signIn);
$('signout').addEventListener('click', () => signOut('Signed out.'));
window.addEventListener('hashchange', render);
if (state.token) {
  whoami().then(start).catch((e) => signOut(e.status === 401 ? 'Sign in again.' : e.message));
} else {
  signOut('');
}
