/**
 * Worker programs (test/<dir>/…-worker.ts) run as plain `node` on the built library, as a
 * user's service runs it: each is bundled with esbuild into dist/test-workers/<dir>/, keeping
 * its `../../src/…` imports, which from there name dist/src/…, and its packages external.
 * Through tsx a worker cost 0.7–1.1 CPU-seconds to start against 0.2 for the same imports from
 * dist/ (measured on this machine), and a CI run starts hundreds of them.
 */
import { renameSync } from 'node:fs';
import path from 'node:path';
import { buildSync } from 'esbuild';
import buildDist from './built-cli.js';
import { REPO_ROOT } from './cli.js';

const OUT_ROOT = path.join(REPO_ROOT, 'dist/test-workers');
const built = new Map<string, string>();

/**
 * The runnable file for a worker program: `node <it> …` instead of `node --import tsx <script> …`.
 * dist/ is rebuilt first if the sources are newer (as the database projects' global setup does).
 */
export function builtWorker(script: string): string {
  const known = built.get(script);
  if (known) return known;
  const rel = path.relative(path.join(REPO_ROOT, 'test'), path.resolve(REPO_ROOT, script));
  // `../../src/` must reach dist/src/ from the bundle as it reached src/ from the script.
  if (rel.startsWith('..') || rel.split(path.sep).length !== 2) {
    throw new Error(`builtWorker: ${script} must be a file in a folder of test/ (test/<dir>/<name>.ts)`);
  }
  buildDist();
  const out = path.join(OUT_ROOT, rel.replace(/\.ts$/, '.mjs'));
  // Two test files may bundle the same worker at once: each writes its own file and renames it.
  const tmp = `${out}.${process.pid}.tmp`;
  const result = buildSync({
    entryPoints: [path.resolve(REPO_ROOT, script)],
    // The metafile's input paths are relative to this: `src/…` below, whatever the caller's cwd.
    absWorkingDir: REPO_ROOT,
    outfile: tmp,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    packages: 'external',
    external: ['../../src/*'],
    metafile: true,
    logLevel: 'error',
  });
  // A source module inside the bundle would be a second copy of the library beside dist/'s.
  const inlined = Object.keys(result.metafile.inputs).filter((f) => f.startsWith('src/'));
  if (inlined.length > 0) throw new Error(`builtWorker: ${script} imports the sources by another path: ${inlined.join(', ')}`);
  renameSync(tmp, out);
  built.set(script, out);
  return out;
}
