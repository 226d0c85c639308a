/**
 * One process at a time on a PGlite directory (src/embedded/lock.ts): waits are bounded and
 * name the holder, a killed holder blocks nobody, `idlease next` draws through a serve that
 * holds the directory, and URLs that would forget every ID are refused.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { runCli, type CliResult } from '../helpers/cli.js';
import { startServe } from '../helpers/serve-process.js';

const root = mkdtempSync(path.join(tmpdir(), 'idlease-lock-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function ids(r: CliResult): bigint[] {
  return r.stdout
    .trim()
    .split('\n')
    .filter((l) => /^\d+$/.test(l))
    .map(BigInt);
}

function expectOneLine(r: CliResult, code: string, exit: number): string {
  expect(r.code, r.stderr).toBe(exit);
  const lines = r.stderr.trim().split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(new RegExp(`^idlease: ${code}: `));
  return lines[0]!;
}

describe('a PGlite directory is opened by one process at a time', () => {
  it('a second knex on the directory waits its bound, then DB_LOCKED names the holder; it opens once the first closes', async () => {
    const url = `pglite:${path.join(root, 'lib')}`;
    const first = connect(url);
    await first.raw('select 1');
    const second = connect(url, { lockTimeoutMs: 300 });
    const started = Date.now();
    const err = await second.raw('select 1').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isIdleaseError(err, 'DB_LOCKED'), String(err)).toBe(true);
    expect((err as Error).message).toContain(`process ${process.pid}`);
    expect(Date.now() - started).toBeLessThan(5_000);
    await first.destroy();
    await expect(second.raw('select 1 as one')).resolves.toBeDefined();
    await second.destroy();
  });

  it('a holder killed with SIGKILL blocks nobody: the next command opens at once (--lock-wait 0)', async () => {
    const dir = path.join(root, 'killed');
    const serve = await startServe(`pglite:${dir}`);
    const held = await runCli(['--url', `pglite:${dir}`, 'tag', 'list', '--lock-wait', '0'], { cwd: root });
    expect(expectOneLine(held, 'DB_LOCKED', 1)).toContain(`process ${serve.child.pid}`);
    await serve.stop('SIGKILL');
    const after = await runCli(['--url', `pglite:${dir}`, '--lock-wait', '0', 'next', 'order', '-n', '2'], { cwd: root });
    expect(after.code, after.stderr).toBe(0);
    expect(ids(after)).toHaveLength(2);
  });

  it('while serve holds the directory, next draws through it; other commands say to stop it; after SIGTERM the IDs go on above', async () => {
    const url = `pglite:${path.join(root, 'served')}`;
    const before = await runCli(['--url', url, 'next', 'order', '-n', '3'], { cwd: root });
    expect(ids(before)).toEqual([1n, 2n, 3n]);
    const serve = await startServe(url);
    const through = await runCli(['--url', url, 'next', 'order', '-n', '4'], { cwd: root });
    expect(through.code, through.stderr).toBe(0);
    const served = ids(through);
    expect(served).toHaveLength(4);
    expect(served[0]! > 3n).toBe(true);
    // The tag is added through the server on the embedded database, as next does without it.
    const fresh = await runCli(['--url', url, '--json', 'next', 'invoice', '-n', '2'], { cwd: root });
    expect(JSON.parse(fresh.stdout)).toEqual({ tag: 'invoice', ids: ['1', '2'] });
    const wrongTable = await runCli(['--url', url, 'next', 'order', '--table', 'other_segments'], { cwd: root });
    expect(expectOneLine(wrongTable, 'DB_LOCKED', 1)).toContain('--table idlease_segments');
    const admin = await runCli(['--url', url, '--lock-wait', '0.3', 'tag', 'list'], { cwd: root });
    const line = expectOneLine(admin, 'DB_LOCKED', 1);
    expect(line).toContain(serve.url);
    expect(line).toContain(`kill -TERM ${serve.child.pid}`);
    expect(await serve.stop('SIGTERM')).toBe(0);
    const after = await runCli(['--url', url, 'next', 'order', '-n', '2'], { cwd: root });
    expect(after.code, after.stderr).toBe(0);
    expect(ids(after)[0]! > served[served.length - 1]!).toBe(true);
  });

  it('a serve token reaches the CLI through the lock file, which only its owner can read', async () => {
    const url = `pglite:${path.join(root, 'token')}`;
    const serve = await startServe(url, ['--token', 's3cret']);
    try {
      const through = await runCli(['--url', url, 'next', 'order', '-n', '2'], { cwd: root });
      expect(through.code, through.stderr).toBe(0);
      expect(ids(through)).toEqual([1n, 2n]);
      const { statSync } = await import('node:fs');
      expect(statSync(`${path.join(root, 'token')}.lock`).mode & 0o077).toBe(0);
    } finally {
      await serve.stop('SIGTERM');
    }
  });
});

describe('URLs that would forget every ID', () => {
  it.each([
    [['--url', 'pglite:', 'next', 'order'], {}, /names no directory/],
    [['--url', '', 'next', 'order'], {}, /--url is empty/],
    [['next', 'order'], { IDLEASE_URL: '' }, /IDLEASE_URL is set but empty/],
    [['--url', 'pglite:memory', 'next', 'order'], {}, /keeps nothing once this command exits/],
    [['--url', 'pglite:memory', 'tag', 'add', 'order'], {}, /keeps nothing once this command exits/],
  ])('%j is refused with BAD_CONFIG (exit 2)', async (args, env, message) => {
    const r = await runCli(args, { cwd: root, env });
    expect(expectOneLine(r, 'BAD_CONFIG', 2)).toMatch(message);
  });

  it('connect("pglite:") is refused; connect("pglite:memory") stays a scratch database for the library', async () => {
    expect(() => connect('pglite:')).toThrow(/names no directory/);
    const scratch = connect('pglite:memory');
    await expect(scratch.raw('select 1')).resolves.toBeDefined();
    await scratch.destroy();
  });

  it('serve on pglite:memory runs, and says that its IDs do not outlive it', async () => {
    const serve = await startServe('pglite:memory');
    await serve.stop('SIGTERM');
    expect(serve.stderr()).toMatch(/"event":"ephemeral".*repeats them/);
  });
});
