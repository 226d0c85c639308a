// `npm run prepare`: builds dist/ where this checkout has its devDependencies — `npm install` or
// `npm ci` in a clone, and `npm pack`/`npm publish`, which run prepare before packing. npm also
// runs it for `npm install <path to a checkout>` from an app, in a checkout that may have no
// node_modules: there nothing can be built, so say how to install from a checkout instead of
// failing on `tsc: not found` (a linked checkout without dist/ would not import anyway).
//
// A dist/ that is already the build of the sources is not built again. Two npm commands run
// prepare on a checkout that `npm install` has just built: `npx idlease …` in the clone (npm 11
// finds the bin in the project's own package.json and installs the checkout into its npx cache as
// a link, which runs prepare: a second full build, ~9 s and ~0.9 GB, before the first command ran)
// and `npm pack` after `npm ci` (prepack). `npm run build` always builds.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { distStaleReason } from './dist-fresh.mjs';

const stale = distStaleReason();
if (stale === undefined) {
  process.stderr.write('idlease: dist/ is the build of these sources; not building it again (`npm run build` does).\n');
  process.exit(0);
}
if (!existsSync(new URL('../node_modules/typescript/package.json', import.meta.url))) {
  process.stderr.write(
    'idlease: cannot build dist/ in this checkout: its devDependencies are not installed. To install idlease from a checkout, ' +
      'run `npm ci && npm pack` in the checkout, then `npm install <checkout>/idlease-<version>.tgz` in your app.\n',
  );
  process.exit(1);
}
const build = spawnSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', 'build'], { stdio: 'inherit' });
process.exit(build.status ?? 1);
