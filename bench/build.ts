/**
 * The package as users run it (bin/idlease.js → dist/): benches that time the CLI or serve build
 * it first, as `npm run build` does; IDLEASE_BENCH_NO_BUILD=1 uses dist/ as it is.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
/** What `npx idlease` runs. */
export const PACKAGE_BIN = path.join(ROOT, 'bin/idlease.js');

export function build(): void {
  if (process.env.IDLEASE_BENCH_NO_BUILD === '1') return;
  const tsc = path.join(ROOT, 'node_modules/typescript/bin/tsc');
  const res = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'inherit' });
  if (res.status !== 0) throw new Error('npm run build failed');
  // The template is migrated by the code just built (src/migrations/embedded-template.ts): made again, as `npm run build` does.
  const made = spawnSync(process.execPath, ['scripts/build-pglite-template.mjs'], { cwd: ROOT, stdio: 'inherit' });
  if (made.status !== 0) throw new Error('scripts/build-pglite-template.mjs failed');
}
