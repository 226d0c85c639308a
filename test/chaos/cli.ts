/**
 * `npm run chaos -- --seeds 1,2,3 --seconds 60`: chaos runs (run.ts) one after another, one line
 * each, and a total; exit 1 when any run repeated an ID, broke a promised order or left a
 * mechanism stalled. The same seed draws the same schedule: rerun a failing seed to see it again.
 */
import { describeRun, runChaos } from './run.js';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback;
}

const seeds = arg('seeds', '1')
  .split(',')
  .map((s) => Number(s.trim()));
const seconds = Number(arg('seconds', '60'));
if (seeds.some((s) => !Number.isInteger(s)) || !Number.isInteger(seconds) || seconds < 20) {
  process.stderr.write('usage: npm run chaos -- --seeds 1,2,3 --seconds 60 (seeds are integers; at least 20 seconds)\n');
  process.exit(2);
}
let ids = 0;
let bad = 0;
let faults = 0;
let worst = 0;
for (const seed of seeds) {
  const r = await runChaos({ seed, seconds, log: process.env.CHAOS_VERBOSE ? (l) => process.stderr.write(`  ${l}\n`) : undefined });
  process.stdout.write(describeRun(r) + '\n');
  ids += r.spaces.reduce((n, s) => n + s.ids, 0);
  faults += Object.values(r.faults).reduce((n, k) => n + k, 0);
  worst = Math.max(worst, r.worstRecoveryMs);
  if (r.spaces.some((s) => s.repeats > 0 || s.orderViolations.length > 0) || r.stalled.length > 0) bad++;
}
process.stdout.write(
  `chaos: ${seeds.length} runs × ${seconds} s, ${ids} IDs, ${faults} faults, worst recovery ${worst} ms, ${bad} runs failed\n`,
);
process.exit(bad > 0 ? 1 : 0);
