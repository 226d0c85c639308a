/**
 * Issue 38, item 1: the README's two commands in a fresh clone, `npm install && npx idlease next
 * order -n 5`, run the checkout's built CLI. npm 11 finds `idlease` in the project's own
 * package.json and links the checkout into its npx cache, which runs the checkout's `prepare`:
 * that was a second full build (9.3 s, 913 MB peak) before the first command ran. Here a copy of
 * the checkout's files with the dependencies linked is built once, as `npm install` builds it,
 * then `npx idlease next order -n 5` runs with an empty npm cache: 1..5, under 400 MB peak RSS
 * (/usr/bin/time), and dist/ not rebuilt. `npm pack` after that (`npm ci && npm pack`) packs the
 * same build instead of building again.
 */
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const show = (r: Run): string => `exit ${r.code}\n--- stderr\n${r.stderr.slice(-3000)}\n--- stdout\n${r.stdout.slice(-2000)}`;

describe('npx idlease in a fresh clone after npm install', () => {
  let work: string;
  let checkout: string;
  let env: NodeJS.ProcessEnv;
  const stamp = (): number => statSync(path.join(checkout, 'dist/.built')).mtimeMs;

  beforeAll(async () => {
    work = mkdtempSync(path.join(tmpdir(), 'idlease-npx-'));
    checkout = path.join(work, 'checkout');
    const ls = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: REPO_ROOT, encoding: 'utf8' });
    if (ls.status !== 0) throw new Error(`git ls-files failed in ${REPO_ROOT}: ${ls.stderr}`);
    for (const file of ls.stdout.split('\0')) {
      if (file === '' || file === 'node_modules' || !existsSync(path.join(REPO_ROOT, file))) continue;
      mkdirSync(path.dirname(path.join(checkout, file)), { recursive: true });
      cpSync(path.join(REPO_ROOT, file), path.join(checkout, file));
    }
    symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(checkout, 'node_modules'));
    const { IDLEASE_URL: _u, DATABASE_URL: _d, ...rest } = process.env;
    // An empty npm cache, so no npx cache entry from an earlier run is found.
    env = { ...rest, npm_config_cache: path.join(work, 'npm-cache'), npm_config_update_notifier: 'false' };
    // What `npm install` runs last in a clone: prepare, a full build.
    const built = await run(process.execPath, ['scripts/prepare.mjs'], checkout, env);
    if (built.code !== 0) throw new Error(`the first build failed: ${show(built)}`);
  }, 240_000);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('runs the checkout’s built CLI without building it again: 1..5, peak RSS ≤ 400 MB', async () => {
    const before = stamp();
    const r = await run('/usr/bin/time', ['-f', 'peak-rss-kb %M', 'npx', 'idlease', 'next', 'order', '-n', '5'], checkout, env);
    expect(r.code, show(r)).toBe(0);
    expect(r.stdout.trim().split('\n')).toEqual(['1', '2', '3', '4', '5']);
    expect(stamp(), 'dist/ was built again').toBe(before);
    const rss = Number(/peak-rss-kb (\d+)/.exec(r.stderr)?.[1]);
    expect(rss / 1024, show(r)).toBeLessThanOrEqual(400);
  }, 120_000);

  it('npm pack after the install packs that build instead of building again', async () => {
    const before = stamp();
    const manifest = readFileSync(path.join(checkout, 'package.json'), 'utf8');
    const r = await run('npm', ['pack', '--loglevel=error', '--pack-destination', work], checkout, env);
    expect(r.code, show(r)).toBe(0);
    const { version } = JSON.parse(manifest) as { version: string };
    expect(existsSync(path.join(work, `idlease-${version}.tgz`)), show(r)).toBe(true);
    expect(stamp(), 'npm pack built dist/ again').toBe(before);
    expect(readFileSync(path.join(checkout, 'package.json'), 'utf8')).toBe(manifest);
  }, 120_000);
});
