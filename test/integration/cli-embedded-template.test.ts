/**
 * New embedded directories copied from a pristine initdb template (src/embedded/template.ts):
 * every directory keeps its own IDs, the template never holds any idlease object, an existing
 * directory is never replaced, and a damaged or disabled template falls back to PGlite's initdb.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, type CliResult } from '../helpers/cli.js';

const root = mkdtempSync(path.join(tmpdir(), 'idlease-template-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function ids(r: CliResult): bigint[] {
  expect(r.code, r.stderr).toBe(0);
  return r.stdout.trim().split('\n').map(BigInt);
}

function project(name: string): string {
  const dir = path.join(root, name);
  mkdirSync(dir);
  return dir;
}

const next = (cwd: string, cache: string, n = 3) =>
  runCli(['next', 'order', '-n', String(n)], { cwd, env: { IDLEASE_CACHE_DIR: cache, IDLEASE_URL: undefined } });

// Each case runs the CLI (through tsx) several times, some with PGlite's initdb: minutes on a loaded 2-core machine.
describe('a new embedded directory from the template', () => {
  const cache = path.join(root, 'cache');

  it('each directory made from it keeps its own IDs; the template holds nothing of idlease', async () => {
    const a = project('a');
    const b = project('b');
    expect(ids(await next(a, cache))).toEqual([1n, 2n, 3n]);
    const templates = readdirSync(cache);
    expect(templates).toHaveLength(1);
    expect(templates[0]).toMatch(/^pglite-\d+\.\d+\.\d+/);
    expect(ids(await next(b, cache))).toEqual([1n, 2n, 3n]);
    expect(ids(await next(a, cache, 2))).toEqual([4n, 5n]);
    expect(ids(await next(b, cache, 1))).toEqual([4n]);

    // Opened through a copy: opening the template itself would change it.
    const copy = path.join(root, 'template-copy');
    cpSync(path.join(cache, templates[0]!), copy, { recursive: true });
    const db = new PGlite(copy);
    try {
      const schemas = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'idlease'");
      const tables = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
      );
      expect(schemas.rows[0]!.n).toBe(0);
      expect(tables.rows[0]!.n).toBe(0);
    } finally {
      await db.close();
    }
  }, 240_000);

  it('a directory that exists (here: empty, made by hand) is left to PGlite, never replaced', async () => {
    const c = project('c');
    mkdirSync(path.join(c, '.idlease', 'pglite'), { recursive: true });
    writeFileSync(path.join(c, '.idlease', 'pglite', 'mine.txt'), 'kept');
    const r = await next(c, cache);
    // PGlite refuses or initialises a non-empty directory; either way the file is still there.
    expect(existsSync(path.join(c, '.idlease', 'pglite', 'mine.txt'))).toBe(true);
    if (r.code === 0) expect(ids(r)).toEqual([1n, 2n, 3n]);
  }, 240_000);

  it('a damaged template is discarded and the directory made by initdb; IDLEASE_CACHE_DIR=off keeps no template', async () => {
    const damaged = path.join(root, 'damaged-cache');
    const version = readdirSync(cache)[0]!;
    mkdirSync(path.join(damaged, version), { recursive: true });
    writeFileSync(path.join(damaged, version, 'PG_VERSION'), '18\n');
    const d = project('d');
    expect(ids(await next(d, damaged))).toEqual([1n, 2n, 3n]);
    expect(existsSync(path.join(damaged, version))).toBe(false);
    expect(ids(await next(d, damaged, 1))).toEqual([4n]);

    const e = project('e');
    expect(ids(await next(e, 'off'))).toEqual([1n, 2n, 3n]);
    expect(existsSync(path.join(e, 'off'))).toBe(false);
  }, 240_000);
});
