/**
 * Tests run the CLI as users do: `node bin/idlease.js`, the built dist/ (tsx transpiling the
 * sources cost ~0.7 s of CPU per CLI process, hundreds of processes a run). This global setup
 * makes sure dist/ is the build of the sources in this checkout: when any file `npm run build`
 * reads is newer than dist/'s stamp (or dist/ or the embedded template is missing) it builds
 * before any test runs, the template included (it is migrated by the built code). CI's `npm ci` has just built it, so there it only compares times.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './cli.js';

const STAMP = path.join(REPO_ROOT, 'dist/.built');
const TEMPLATE = path.join(REPO_ROOT, 'dist/pglite-template.tar.gz');

function newest(dir: string): number {
  let latest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    latest = Math.max(latest, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return latest;
}

function run(args: string[], what: string): void {
  const r = spawnSync(process.execPath, args, { cwd: REPO_ROOT, stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`${what} failed: run \`npm run build\` and fix what it reports`);
}

export default function setup(): void {
  const sources = Math.max(
    newest(path.join(REPO_ROOT, 'src')),
    newest(path.join(REPO_ROOT, 'migrations')),
    ...['package.json', 'tsconfig.json', 'tsconfig.build.json', 'scripts/build-pglite-template.mjs'].map(
      (f) => statSync(path.join(REPO_ROOT, f)).mtimeMs,
    ),
  );
  // spawnSync blocks this process: the setups of several projects never build at once.
  if (!existsSync(STAMP) || statSync(STAMP).mtimeMs < sources) {
    process.stderr.write('built-cli: dist/ is older than the sources: building it (tsc -p tsconfig.build.json, then the template)\n');
    run([path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], 'tsc -p tsconfig.build.json');
    // The template is migrated by the built code (src/migrations/embedded-template.ts): a change to the migrations changes it.
    run([path.join(REPO_ROOT, 'scripts/build-pglite-template.mjs')], 'scripts/build-pglite-template.mjs');
    writeFileSync(STAMP, '');
  }
  if (!existsSync(TEMPLATE)) run([path.join(REPO_ROOT, 'scripts/build-pglite-template.mjs')], 'scripts/build-pglite-template.mjs');
}
