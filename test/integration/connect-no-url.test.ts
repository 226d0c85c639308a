/**
 * `connect()` never falls back silently (issue 42, item 5). A library app that loses its URL —
 * `connect(process.env.DATABSE_URL)`, a typo in a deployment — used to create ./.idlease/ and hand
 * out 1, and a second pod did the same. Now no URL (undefined or empty) is BAD_CONFIG saying to
 * pass one, or `pglite:<dir>` for the embedded database on purpose; nothing is created. The CLI
 * keeps its embedded default and says when it creates it.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, knexConfig } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { runCli, runNode, TSX_LOADER } from '../helpers/cli.js';

let cwd: string;
beforeAll(() => {
  cwd = mkdtempSync(path.join(tmpdir(), 'idlease-nourl-'));
});
afterAll(() => {
  rmSync(cwd, { recursive: true, force: true });
});

/** A directory of its own for one test: what one leaves behind must not change what another sees. */
function dirFor(name: string): string {
  const dir = path.join(cwd, name);
  mkdirSync(dir);
  return dir;
}

function refusal(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('connect() with no URL', () => {
  it.each([
    ['undefined (an unset variable)', undefined],
    ['an empty string (a variable set to nothing)', ''],
  ])('%s is BAD_CONFIG saying to pass a URL or pglite:<dir>, from connect() and knexConfig()', (_, url) => {
    for (const fn of [() => connect(url), () => knexConfig(url)]) {
      const err = refusal(fn);
      expect(isIdleaseError(err, 'BAD_CONFIG'), String(err)).toBe(true);
      expect((err as Error).message).toMatch(/no database URL/i);
      expect((err as Error).message).toMatch(/pglite:\.idlease\/pglite/);
      expect((err as Error).message).toMatch(/mysql:\/\/.*postgres:\/\//);
    }
  });

  it('a library app whose variable is unset creates nothing and hands out nothing (a real process in an empty directory)', async () => {
    const app = [
      `import { connect, migrate, createSegmentAllocator } from ${JSON.stringify(path.resolve('src/index.ts'))};`,
      `const knex = connect(process.env.DATABSE_URL);`,
      `await migrate(knex);`,
      `const alloc = createSegmentAllocator({ knex, tag: 'order', create: true });`,
      `console.log(String(await alloc.next()));`,
      `process.exit(0);`,
    ].join('\n');
    const dir = dirFor('lib');
    const r = await runNode(['--import', TSX_LOADER, '--input-type=module', '-e', app], { cwd: dir, timeoutMs: 40_000 });
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/BAD_CONFIG|no database URL/);
    expect(r.code).not.toBe(0);
    expect(existsSync(path.join(dir, '.idlease'))).toBe(false);
  });

  it('pglite:<dir> on purpose still opens the embedded database', async () => {
    const knex = connect(`pglite:${path.join(cwd, 'chosen')}`);
    try {
      expect((await knex.raw('SELECT 1 AS one')).rows[0].one).toBe(1);
    } finally {
      await knex.destroy();
    }
  });

  it('the CLI keeps its embedded default, and says it created it', async () => {
    const r = await runCli(['next', 'order'], { cwd: dirFor('cli') });
    expect(r.stderr).toMatch(/created a new embedded database in \.\/\.idlease\/pglite\/ \(no --url/);
    expect(r.stdout).toBe('1\n');
    expect(r.code).toBe(0);
  });
});
