// Is dist/ the build of this checkout's sources? `npm run build` stamps dist/.built when it ends;
// dist/ is fresh when that stamp is newer than every file and directory the build reads (a
// directory's time catches a deleted source) and the embedded template is there. Read by
// scripts/prepare.mjs (a fresh build is not built again) and test/helpers/built-cli.ts.
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const CHECKOUT = fileURLToPath(new URL('..', import.meta.url));

function newest(p) {
  const s = statSync(p, { throwIfNoEntry: false });
  if (s === undefined) return 0;
  let latest = s.mtimeMs;
  if (s.isDirectory()) for (const name of readdirSync(p)) latest = Math.max(latest, newest(path.join(p, name)));
  return latest;
}

/** Why dist/ is not the build of the sources in `root`, or undefined when it is. */
export function distStaleReason(root = CHECKOUT) {
  const stamp = statSync(path.join(root, 'dist/.built'), { throwIfNoEntry: false });
  if (stamp === undefined) return 'dist/ was never built';
  if (!existsSync(path.join(root, 'dist/pglite-template.tar.gz'))) return 'dist/ has no embedded template';
  const inputs = [
    'src',
    'migrations',
    'package.json',
    'tsconfig.json',
    'tsconfig.build.json',
    'scripts/build-pglite-template.mjs',
    // A newer PGlite installed (npm install after a lockfile change) needs a new template.
    'node_modules/@electric-sql/pglite/package.json',
  ];
  const changed = inputs.find((input) => newest(path.join(root, input)) > stamp.mtimeMs);
  return changed === undefined ? undefined : `${changed} is newer than dist/`;
}
