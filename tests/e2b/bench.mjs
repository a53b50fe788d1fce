// tests/bench/e2b.sh's E2B side: N rounds of Sandbox.create -> the first
// commands.run('true') -> kill, then N commands.run('true') in one sandbox.
// Prints "KEY MS" lines: e2b_create_first (create until the first command
// returned), e2b_run (one command in a running sandbox).
import { Sandbox } from 'e2b';

const n = Number(process.argv[2] || 5);
const now = () => performance.now();
for (let i = 0; i < n; i++) {
  const t0 = now();
  const sbx = await Sandbox.create({ metadata: { bench: 'e2b' } });
  await sbx.commands.run('true');
  console.log('e2b_create_first', Math.round(now() - t0));
  await sbx.kill();
}
const sbx = await Sandbox.create({ metadata: { bench: 'e2b' } });
for (let i = 0; i < n; i++) {
  const t0 = now();
  await sbx.commands.run('true');
  console.log('e2b_run', Math.round(now() - t0));
}
await sbx.kill();
