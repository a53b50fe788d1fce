// Drives the web console in Debian's headless Chromium (puppeteer-core):
// tests/integration/test_console.sh gives it the controller's URL, an
// admin token, members of two tenants, the CLI and a folder for
// screenshots. Prints "sandbox: ID" for the sandbox it made; exits 1 with
// the reason at the first check that fails.
import { execFileSync } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import puppeteer from 'puppeteer-core';

const env = (k) => {
  if (!process.env[k]) throw new Error(`${k} is not set`);
  return process.env[k];
};
const URL_ = env('CONSOLE_URL'), ADMIN = env('ADMIN_TOKEN'), MEMBER_A = env('MEMBER_A'), MEMBER_B = env('MEMBER_B');
const CLI = env('SANDBOX_CLI'), IMAGE = env('ITEST_IMAGE'), SHOTS = env('SHOTS'), TAG = env('TAG');
const origin = new URL(URL_).origin;
const tokens = [ADMIN, MEMBER_A, MEMBER_B];

let checks = 0;
function check(ok, what) {
  if (!ok) throw new Error('FAIL: ' + what);
  checks++;
  console.log('ok: ' + what);
}

function cli(token, ...args) {
  return execFileSync(CLI, args, { env: { ...process.env, SANDBOX_URL: URL_, SANDBOX_TOKEN: token }, encoding: 'utf8',
    timeout: 180000 }).trim();
}

const requests = [];
const browser = await puppeteer.launch({
  executablePath: env('CHROMIUM'), headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--disable-extensions',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-default-apps'],
});
let sbx = null;
try {
  // every request any page makes, in every context
  const watch = (page) => {
    page.on('request', (r) => requests.push(r.url()));
    page.on('dialog', (d) => d.accept(d.type() === 'prompt' ? '7200' : undefined));
    page.on('pageerror', (e) => console.log('page error: ' + e.message));
  };
  const page = await browser.newPage();
  watch(page);
  await page.setViewport({ width: 1360, height: 900 });

  // ---- sign in
  await page.goto(URL_ + '/console/', { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('#signin:not([hidden])');
  await page.type('#token', 'not-a-token');
  await page.click('#signin button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#signin-error').textContent.length > 0);
  check((await page.$eval('#signin-error', (e) => e.textContent)).includes('does not know this token'),
    'a wrong token is refused with a message');
  await page.type('#token', ADMIN);
  await page.click('#signin button[type=submit]');
  await page.waitForSelector('#top:not([hidden])');
  check((await page.$eval('#who', (e) => e.textContent)).startsWith('admin'), 'signed in as admin');
  check(await page.evaluate(() => document.cookie === '' && localStorage.length === 0),
    'no cookie and nothing in localStorage');
  check(await page.evaluate((t) => Object.values(sessionStorage).includes(t), ADMIN),
    "the token is in the tab's sessionStorage");
  check(!(await page.$eval('#token', (e) => e.value)), 'the sign-in field is emptied');

  // ---- overview
  await page.waitForSelector('#phase-counts');
  await page.waitForSelector('main table meter');
  check((await page.$$('main table tbody tr')).length >= 1, 'the overview lists workers with capacity bars');

  // ---- a sandbox created through the CLI appears in the live list within 2 s
  await page.goto(URL_ + '/console/#/sandboxes', { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('#sandbox-list');
  await new Promise((r) => setTimeout(r, 500)); // the live list's long poll is waiting
  const out = cli(MEMBER_A, 'create', '--image', IMAGE, '--memory-mib', '64', '--name', 'console-' + TAG);
  const t0 = Date.now();
  sbx = out.split(/\s+/)[0];
  console.log('sandbox: ' + sbx);
  await page.waitForSelector(`#sandbox-list tr[data-id="${sbx}"]`, { timeout: 2000 });
  const appeared = Date.now() - t0;
  check(appeared <= 2000, `the new sandbox appeared in the list ${appeared} ms after the create answered`);
  await page.screenshot({ path: `${SHOTS}/console-sandboxes.png`, fullPage: true });

  // ---- its page: placement and a live log line
  await page.click(`#sandbox-list tr[data-id="${sbx}"]`);
  await page.waitForFunction(() => location.hash.startsWith('#/sandbox/'));
  await page.waitForFunction(() => /placed on/.test(document.querySelector('#placement')?.textContent || ''),
    { timeout: 60000 });
  check(true, 'its page shows where it was placed and why');
  await page.waitForFunction(() => document.querySelector('main h1 .phase')?.textContent === 'running',
    { timeout: 120000 });
  const line = `console-line-${TAG}`;
  // the log is followed once it runs; what the main process writes shows
  await new Promise((r) => setTimeout(r, 1000));
  cli(MEMBER_A, 'exec', sbx, '--', 'sh', '-c', `printf '${line}\\n' > /proc/1/fd/1`);
  await page.waitForFunction((l) => document.querySelector('#log')?.textContent.includes(l), { timeout: 15000 }, line);
  check(true, 'a line its main process wrote shows in the live log');
  await page.waitForFunction(() => document.querySelectorAll('#operations tbody tr').length >= 2);
  check(true, 'its operations are listed');
  await page.screenshot({ path: `${SHOTS}/console-sandbox.png`, fullPage: true });

  // ---- extend, confirmed (the prompt answered 7200 s)
  await page.click('#extend');
  await page.waitForFunction(() => /^done: /.test(document.querySelector('#status').textContent), { timeout: 15000 });
  const got = JSON.parse(cli(ADMIN, 'get', sbx, '--json')).sandbox;
  const left = (Date.parse(got.expires_at) - Date.now()) / 1000;
  check(left > 7000 && left <= 7200, `extend from its page set it to expire in ${Math.round(left)} s`);

  // ---- the overview counts it running (its operations in the line)
  await page.goto(URL_ + '/console/#/', { waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => Number(document.querySelector('#phase-counts [data-phase=running] b')?.textContent) >= 1);
  check(/[1-9]\d* finished/.test(await page.$eval('#ops-summary', (e) => e.textContent)),
    'the overview counts running sandboxes and finished operations');
  await page.screenshot({ path: `${SHOTS}/console-overview.png`, fullPage: true });
  await page.goto(URL_ + `/console/#/sandbox/${sbx}`, { waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => document.querySelector('main h1 .phase')?.textContent === 'running');

  // ---- its container killed behind its back: failed, with the reason
  const cid = execFileSync('docker', ['ps', '-q', '--filter', `label=dev.sandbox.id=${sbx}`], { encoding: 'utf8' }).trim();
  check(cid.length > 0, 'its container is found');
  execFileSync('docker', ['kill', cid]);
  await page.waitForFunction(() => document.querySelector('main h1 .phase')?.textContent === 'failed',
    { timeout: 60000 });
  const failure = await page.$eval('#failure', (e) => e.textContent);
  check(/exited/.test(failure), `its page shows it failed and why (${failure})`);

  // ---- delete from its page, confirmed
  await page.click('#delete');
  await page.waitForFunction(() => /^(deleting|deleted)$/.test(document.querySelector('main h1 .phase')?.textContent),
    { timeout: 60000 });
  check(true, 'delete from its page');

  // ---- events, tenants, tokens
  await page.goto(URL_ + `/console/#/events?sandbox=${sbx}`, { waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => document.querySelectorAll('#event-rows tr').length > 0);
  check((await page.$eval('#event-rows', (e) => e.textContent)).includes('sandbox.failed'),
    'the events view has its sandbox.failed');
  await page.screenshot({ path: `${SHOTS}/console-events.png`, fullPage: true });
  await page.goto(URL_ + '/console/#/tenants', { waitUntil: 'domcontentloaded' });
  await page.waitForFunction(() => document.querySelectorAll('main section.panel').length > 0);
  await page.screenshot({ path: `${SHOTS}/console-tenants.png`, fullPage: true });
  await page.goto(URL_ + '/console/#/tokens', { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('main table');
  const tokensText = await page.$eval('main', (e) => e.textContent);
  check(!tokens.some((t) => tokensText.includes(t)), 'the tokens view shows no token secret');
  await page.screenshot({ path: `${SHOTS}/console-tokens.png`, fullPage: true });
  // revoke, confirmed: the token is refused from then on
  const spare = cli(ADMIN, 'tokens', 'create', '--tenant', env('TENANT_A'), '--role', 'member', '--name',
    'console-revoke-' + TAG);
  appendFileSync(env('SECRETS_FILE'), spare + '\n'); // the suite checks no daemon log holds it
  tokens.push(spare);
  cli(spare, 'list');
  check(true, 'a spare token works before it is revoked');
  await page.goto(URL_ + '/console/#/', { waitUntil: 'domcontentloaded' });
  await page.goto(URL_ + '/console/#/tokens', { waitUntil: 'domcontentloaded' });
  const row = await page.waitForSelector(`xpath///tr[td[normalize-space()="console-revoke-${TAG}"]]`);
  const rowId = await row.evaluate((r) => r.dataset.id);
  await (await row.$('button.danger')).click();
  await page.waitForFunction((id) => document.querySelector(`tr[data-id="${id}"]`)?.textContent.includes('revoked'),
    { timeout: 15000 }, rowId);
  let refused = '';
  for (let i = 0; i < 20 && !refused; i++) { // (every controller forgets it at the revocation's NOTIFY)
    try { cli(spare, 'list'); } catch (e) { refused = String(e.stderr).trim(); }
    if (!refused) await new Promise((r) => setTimeout(r, 250));
  }
  check(/unauthorized: invalid, revoked/.test(refused), `the token revoked from the tokens view is refused (${refused})`);

  // ---- sign out: the token leaves the tab
  await page.click('#signout');
  await page.waitForSelector('#signin:not([hidden])');
  check(await page.evaluate(() => sessionStorage.length === 0), 'signing out clears sessionStorage');

  // ---- a member of another tenant sees nothing of it
  const ctx = await browser.createBrowserContext();
  const other = await ctx.newPage();
  watch(other);
  await other.goto(URL_ + '/console/', { waitUntil: 'domcontentloaded' });
  await other.waitForSelector('#signin:not([hidden])');
  await other.type('#token', MEMBER_B);
  await other.click('#signin button[type=submit]');
  await other.waitForSelector('#top:not([hidden])');
  check((await other.$eval('#who', (e) => e.textContent)).startsWith('member'), 'signed in as a member');
  check(await other.$eval('a[data-view=tokens]', (e) => e.hidden), 'a member has no tokens view');
  await other.waitForSelector('#phase-counts');
  check(!/\bnull\b|undefined/.test(await other.$eval('main', (e) => e.textContent)),
    "a member's overview shows no null or undefined");
  await other.goto(URL_ + '/console/#/sandboxes?phase=failed', { waitUntil: 'domcontentloaded' });
  await other.waitForSelector('#sandbox-list p, #sandbox-list table');
  check(!(await other.$(`#sandbox-list tr[data-id="${sbx}"]`)), "a member of another tenant does not list it");
  await other.goto(URL_ + `/console/#/sandbox/${sbx}`, { waitUntil: 'domcontentloaded' });
  await other.waitForFunction(() => /not_found/.test(document.querySelector('main')?.textContent || ''));
  check(true, "a member of another tenant does not open it (not_found)");
  await ctx.close();

  // ---- behind nginx under a path prefix: the API is found beside the console
  const prefixed = env('PREFIXED_URL');
  const pctx = await browser.createBrowserContext();
  const ppage = await pctx.newPage();
  const prequests = [];
  ppage.on('request', (r) => prequests.push(r.url()));
  await ppage.goto(prefixed + '/console/', { waitUntil: 'domcontentloaded' });
  await ppage.waitForSelector('#signin:not([hidden])');
  await ppage.type('#token', ADMIN);
  await ppage.click('#signin button[type=submit]');
  await ppage.waitForSelector('#top:not([hidden])');
  await ppage.waitForSelector('#phase-counts');
  await ppage.goto(prefixed + '/console/#/sandboxes', { waitUntil: 'domcontentloaded' });
  await ppage.waitForSelector('#sandbox-list p, #sandbox-list table');
  const api = prequests.filter((u) => u.includes('/v1/'));
  check(api.length > 0 && api.every((u) => u.startsWith(prefixed + '/v1/')),
    `behind a proxy's path prefix the console calls the API under it (${api.length} calls)`);
  check(!prequests.some((u) => tokens.some((t) => u.includes(t))), 'no URL holds a token behind the proxy either');
  await pctx.close();

  // ---- every request went to this origin, none carried a token in its URL
  const foreign = requests.filter((u) => !u.startsWith(origin + '/') && !u.startsWith('blob:') && !u.startsWith('data:'));
  check(foreign.length === 0, `no request left for another origin (${requests.length} made) ${foreign.join(' ')}`);
  check(!requests.some((u) => tokens.some((t) => u.includes(t))), 'no URL holds a token');
  console.log(`${checks} checks passed`);
} finally {
  await browser.close();
}
