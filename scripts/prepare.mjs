// `npm run prepare`: builds dist/ where this checkout has its devDependencies — `npm install` or
// `npm ci` in a clone, and `npm pack`/`npm publish`, which run prepare before packing. npm also
// runs it for `npm install <path to a checkout>` from an app, in a checkout that may have no
// node_modules: there nothing can be built, so say how to install from a checkout instead of
// failing on `tsc: not found` (a linked checkout without dist/ would not import anyway).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

if (!existsSync(new URL('../node_modules/typescript/package.json', import.meta.url))) {
  process.stderr.write(
    'idlease: cannot build dist/ in this checkout: its devDependencies are not installed. To install idlease from a checkout, ' +
      'run `npm ci && npm pack` in the checkout, then `npm install <checkout>/idlease-<version>.tgz` in your app.\n',
  );
  process.exit(1);
}
const build = spawnSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', 'build'], { stdio: 'inherit' });
process.exit(build.status ?? 1);
