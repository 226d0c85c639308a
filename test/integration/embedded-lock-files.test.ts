/**
 * An embedded database is its owner's only, whoever made its directory: a directory made before
 * the first run (`mkdir -p`, a volume) skips the template and PGlite's initdb writes 0666 files;
 * every open makes them 0600 (directories 0700). A lock file another
 * user owns is refused, naming that user (a real second uid: the file is chowned to nobody).
 * And what a holder of the lock answers is checked: a fake holder answering `42 42 42` makes
 * `next` fail INVARIANT, printing no ID.
 */
import { chmodSync, chownSync, lstatSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { acquireDirectoryLock } from '../../src/embedded/lock.js';
import { runCli } from '../helpers/cli.js';

const root = mkdtempSync(path.join(tmpdir(), 'idlease-lockfiles-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Every entry under `dir` (itself included) that anyone but its owner may read, write or enter. */
function openToOthers(dir: string): string[] {
  const loose: string[] = [];
  const visit = (p: string): void => {
    const st = lstatSync(p);
    if (st.isSymbolicLink()) return;
    if ((st.mode & 0o077) !== 0) loose.push(`${path.relative(dir, p) || '.'} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) for (const e of readdirSync(p)) visit(path.join(p, e));
  };
  visit(dir);
  return loose;
}

it('a data directory left open to others (0755 directories, 0666 files: what mkdir -p and initdb leave) is 0700/0600 once opened', async () => {
  // initdb itself is ~35 s and ~750 MB on a loaded CI core: the directory is made from the
  // template, then loosened exactly as a mkdir -p'd directory and PGlite's initdb leave it.
  const dir = path.join(root, 'loose');
  const first = await runCli(['--url', `pglite:${dir}`, 'next', 'order'], { cwd: root });
  expect(first.code, first.stderr).toBe(0);
  const loosen = (p: string): void => {
    const st = lstatSync(p);
    chmodSync(p, st.isDirectory() ? 0o755 : 0o666);
    if (st.isDirectory()) for (const e of readdirSync(p)) loosen(path.join(p, e));
  };
  loosen(dir);
  expect(openToOthers(dir).length).toBeGreaterThan(900);
  const again = await runCli(['--url', `pglite:${dir}`, 'next', 'order'], { cwd: root });
  expect(again.code, again.stderr).toBe(0);
  expect(again.stdout.trim()).toBe('2');
  expect(openToOthers(dir)).toEqual([]);
});

it('a lock file another user owns is refused, BAD_CONFIG naming that user', async () => {
  const dir = path.join(root, 'foreign');
  const lockFile = `${dir}.lock`;
  writeFileSync(lockFile, '');
  chmodSync(lockFile, 0o666);
  chownSync(lockFile, 65534, 65534); // nobody: this suite runs as root, as CI does
  const r = await runCli(['--url', `pglite:${dir}`, 'next', 'order'], { cwd: root });
  expect(r.code, r.stderr).toBe(2);
  expect(r.stdout).toBe('');
  expect(r.stderr).toMatch(/^idlease: BAD_CONFIG: The lock file .*foreign\.lock belongs to (nobody \(uid 65534\)|uid 65534)/);
  expect(lstatSync(lockFile).uid).toBe(65534);
});

it('IDs a holder answers are checked: a fake holder answering 42 42 42 makes next fail INVARIANT, printing none', async () => {
  const dir = path.join(root, 'faked');
  const answers = [
    ['42', '42', '42'],
    ['7', '8'],
    ['9', '10', '11'],
  ];
  let calls = 0;
  const fake: Server = createServer((_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ ids: answers[calls++ % answers.length] }));
  });
  await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
  const lock = await acquireDirectoryLock(dir, { timeoutMs: 0 });
  try {
    const port = (fake.address() as { port: number }).port;
    lock!.announce({ serve: { url: `http://127.0.0.1:${port}`, table: 'idlease_segments', maxBatch: 10_000 } });
    const repeated = await runCli(['--url', `pglite:${dir}`, 'next', 'order', '-n', '3'], { cwd: root });
    expect(repeated.code, repeated.stderr).toBe(1);
    expect(repeated.stdout).toBe('');
    expect(repeated.stderr).toMatch(/^idlease: INVARIANT: .*42 after 42/);
    // Too few for n=3.
    const short = await runCli(['--url', `pglite:${dir}`, 'next', 'order', '-n', '3'], { cwd: root });
    expect(short.stderr).toMatch(/^idlease: INVARIANT: .*2 IDs for n=3/);
    // A right answer passes.
    const right = await runCli(['--url', `pglite:${dir}`, 'next', 'order', '-n', '3'], { cwd: root });
    expect(right.code, right.stderr).toBe(0);
    expect(right.stdout.trim().split('\n')).toEqual(['9', '10', '11']);
  } finally {
    lock?.release();
    await new Promise((r) => fake.close(r));
  }
});
