// `npm run test:unit` (and the unit step of `npm test`): the unit project once, with the network
// switched off where this machine allows it (`unshare -n`: root or user namespaces), which proves
// that test/unit needs no database and no port. Elsewhere it runs with the network up and says so.
// Its JSON report is a file of its own, test-results/vitest-unit.json, so the run of the other
// projects (test-results/vitest.json) does not overwrite it; scripts/test-summary.mjs reads both.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const vitest = fileURLToPath(new URL('../node_modules/vitest/vitest.mjs', import.meta.url));
const args = [vitest, 'run', '--project', 'unit', '--outputFile.json=test-results/vitest-unit.json', ...process.argv.slice(2)];
const offline = spawnSync('unshare', ['-n', 'true'], { stdio: 'ignore' }).status === 0;
if (!offline) process.stderr.write('test:unit: unshare -n is not permitted here; the unit tests run with the network up\n');
const run = offline
  ? spawnSync('unshare', ['-n', process.execPath, ...args], { stdio: 'inherit' })
  : spawnSync(process.execPath, args, { stdio: 'inherit' });
process.exit(run.status ?? 1);
