/**
 * New embedded databases unpacked from the template the package ships (src/embedded/template.ts,
 * made by `npm run build`): the template carries idlease's default migrations but no tag, no ID
 * and no install id; every directory keeps its own IDs and gets its own install id on first
 * open; a template older than the code is migrated as any older directory is; an existing
 * directory is never replaced, a template the installed PGlite does not open falls back to
 * initdb, and a first run stays within 400 MB of peak RSS (a 512 MB container) where initdb
 * takes ~0.9 GB.
 *
 * Which way a database was made is read from PostgreSQL itself: every copy of the template has
 * the template's system identifier, initdb draws a new one.
 */
import { PGlite } from '@electric-sql/pglite';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/index.js';
import { INSTALL_ID_PENDING } from '../../src/embedded/template.js';
import { planMigrations } from '../../src/migrations/migrate.js';
import { REPO_ROOT, runCli, runNode, type CliResult } from '../helpers/cli.js';

const ARCHIVE = path.join(REPO_ROOT, 'dist/pglite-template.tar.gz');
const BUILT_BIN = path.join(REPO_ROOT, 'bin/idlease.js');
const GNU_TIME = '/usr/bin/time';
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

const next = (cwd: string, env: NodeJS.ProcessEnv = {}, n = 3) =>
  runCli(['next', 'order', '-n', String(n)], { cwd, env: { IDLEASE_URL: undefined, DATABASE_URL: undefined, ...env } });

async function systemIdentifier(db: PGlite): Promise<string> {
  const r = await db.query<{ id: string }>('SELECT system_identifier::text AS id FROM pg_control_system()');
  return r.rows[0]!.id;
}

/** Open a closed data directory, read from it, close it. */
async function inspect<T>(dir: string, read: (db: PGlite) => Promise<T>): Promise<T> {
  const db = new PGlite(dir);
  try {
    return await read(db);
  } finally {
    await db.close();
  }
}

/** The install ids a data directory holds (idlease.idlease_install), oldest first. */
async function installIds(db: PGlite): Promise<string[]> {
  return (await db.query<{ id: string }>('SELECT id FROM idlease.idlease_install ORDER BY created_at, id')).rows.map((r) => r.id);
}

/** knex's bookkeeping of idlease's migrations: each name with the time it ran. */
async function appliedMigrations(db: PGlite): Promise<string[]> {
  const r = await db.query<{ name: string; at: string }>(
    'SELECT name, migration_time::text AS at FROM idlease.idlease_migrations ORDER BY id',
  );
  return r.rows.map((row) => `${row.name} @ ${row.at}`);
}

/** A copy of the shipped archive changed by `change` (run on the open copy), packed as another template. */
async function alteredTemplate(name: string, change: (db: PGlite, dir: string) => Promise<void>): Promise<string> {
  const dir = path.join(root, name);
  mkdirSync(dir);
  untar(ARCHIVE, dir);
  const db = new PGlite(dir);
  try {
    await change(db, dir);
  } finally {
    await db.close();
  }
  const archive = path.join(root, `${name}.tar.gz`);
  execFileSync('tar', ['-czf', archive, '-C', dir, '.']);
  return archive;
}

/** The system's own tar reads the archive: a check of its format independent of idlease's reader. */
function untar(archive: string, to: string): void {
  execFileSync('tar', ['-xzf', archive, '-C', to]);
}

let templateId: string;

beforeAll(async () => {
  if (!existsSync(ARCHIVE)) throw new Error(`${ARCHIVE} is missing: run \`npm run build\` (it makes the template) before these tests.`);
  // Opened through a copy: opening the template's own files would change them.
  const copy = path.join(root, 'template-copy');
  mkdirSync(copy);
  untar(ARCHIVE, copy);
  templateId = await inspect(copy, systemIdentifier);
}, 120_000);

// Each case runs the CLI several times, some with PGlite's initdb: minutes on a loaded 2-core machine.
describe('a new embedded database from the shipped template', () => {
  it("holds idlease's default migrations, knex's bookkeeping included, but no tag, no ID and no install id", async () => {
    const copy = path.join(root, 'template-copy');
    const found = await inspect(copy, async (db) => ({
      migrations: (await appliedMigrations(db)).map((m) => m.split(' @ ')[0]),
      tags: (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM idlease.idlease_segments')).rows[0]!.n,
      installIds: await installIds(db),
    }));
    expect(found).toEqual({ migrations: planMigrations('pglite', {}).migrations.map((m) => m.name), tags: 0, installIds: [] });
    // Each copy's first open writes its install id: the marker says it is still to be written.
    expect(existsSync(path.join(copy, INSTALL_ID_PENDING))).toBe(true);
  }, 120_000);

  it('each directory made from it gets an install id of its own on first open, and no migration runs', async () => {
    const a = project('install-a');
    const b = project('install-b');
    const template = await inspect(path.join(root, 'template-copy'), appliedMigrations);
    expect(ids(await next(a, {}, 1))).toEqual([1n]);
    expect(ids(await next(b, {}, 1))).toEqual([1n]);
    const dirA = path.join(a, '.idlease', 'pglite');
    const dirB = path.join(b, '.idlease', 'pglite');
    const [idA, idB] = [await inspect(dirA, installIds), await inspect(dirB, installIds)];
    expect(idA).toHaveLength(1);
    expect(idB).toHaveLength(1);
    expect(idA[0]).not.toBe(idB[0]);
    expect(existsSync(path.join(dirA, INSTALL_ID_PENDING))).toBe(false);
    // The bookkeeping is the template's, times and all: the first run found the directory current.
    expect(await inspect(dirA, appliedMigrations)).toEqual(template);
    // Later runs and `migrate` keep the id and find nothing to do.
    const migrated = await runCli(['migrate'], { cwd: a, env: { IDLEASE_URL: undefined, DATABASE_URL: undefined } });
    expect(migrated.code, migrated.stderr).toBe(0);
    expect(migrated.stdout).toMatch(/nothing to do/);
    expect(ids(await next(a, {}, 1))).toEqual([2n]);
    expect(await inspect(dirA, installIds)).toEqual(idA);
  }, 240_000);

  it('a copy whose first open stopped after writing its install id (the marker still there) keeps that id', async () => {
    const h = project('install-crash');
    const dir = path.join(h, '.idlease', 'pglite');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    untar(ARCHIVE, dir);
    await inspect(dir, (db) => db.query("INSERT INTO idlease.idlease_install (id) VALUES ('written-before-the-crash')"));
    expect(existsSync(path.join(dir, INSTALL_ID_PENDING))).toBe(true);
    expect(ids(await next(h, {}, 1))).toEqual([1n]);
    expect(await inspect(dir, installIds)).toEqual(['written-before-the-crash']);
    expect(existsSync(path.join(dir, INSTALL_ID_PENDING))).toBe(false);
  }, 240_000);

  it('a template older than the code (fewer migrations, or none) is migrated on first use', async () => {
    // As a release before the install table shipped it: no install table, its migration not recorded.
    const older = await alteredTemplate('older', async (db) => {
      await db.exec("DROP TABLE idlease.idlease_install; DELETE FROM idlease.idlease_migrations WHERE name = 'install:idlease_install'");
    });
    // As idlease 0.2 shipped it: initdb's directory, nothing of idlease's, no marker.
    const initdbOnly = await alteredTemplate('initdb-only', async (db, dir) => {
      await db.exec('DROP SCHEMA idlease CASCADE');
      rmSync(path.join(dir, INSTALL_ID_PENDING));
    });
    for (const archive of [older, initdbOnly]) {
      const g = project(`older-${path.basename(archive, '.tar.gz')}`);
      expect(ids(await next(g, { IDLEASE_PGLITE_TEMPLATE: archive }))).toEqual([1n, 2n, 3n]);
      const dir = path.join(g, '.idlease', 'pglite');
      expect(await inspect(dir, systemIdentifier)).toBe(templateId);
      const names = (await inspect(dir, appliedMigrations)).map((m) => m.split(' @ ')[0]);
      expect(names.sort()).toEqual(
        planMigrations('pglite', {})
          .migrations.map((m) => m.name)
          .sort(),
      );
      expect(await inspect(dir, installIds)).toHaveLength(1);
    }
  }, 240_000);

  it('each directory made from it keeps its own IDs', async () => {
    const a = project('a');
    const b = project('b');
    expect(ids(await next(a))).toEqual([1n, 2n, 3n]);
    expect(ids(await next(b))).toEqual([1n, 2n, 3n]);
    expect(ids(await next(a, {}, 2))).toEqual([4n, 5n]);
    expect(ids(await next(b, {}, 1))).toEqual([4n]);
    expect(await inspect(path.join(a, '.idlease', 'pglite'), systemIdentifier)).toBe(templateId);
    expect(await inspect(path.join(a, '.idlease', 'pglite'), installIds)).not.toEqual(
      await inspect(path.join(b, '.idlease', 'pglite'), installIds),
    );
    // No scratch copy is left beside the directory.
    expect(readdirSync(path.join(a, '.idlease')).filter((f) => f.includes('.tmp-'))).toEqual([]);
  }, 240_000);

  it('a directory that exists (here: empty, made by hand) is left to PGlite, never replaced', async () => {
    const c = project('c');
    mkdirSync(path.join(c, '.idlease', 'pglite'), { recursive: true });
    writeFileSync(path.join(c, '.idlease', 'pglite', 'mine.txt'), 'kept');
    const r = await next(c);
    // PGlite refuses or initialises a non-empty directory; either way the file is still there.
    expect(readFileSync(path.join(c, '.idlease', 'pglite', 'mine.txt'), 'utf8')).toBe('kept');
    if (r.code === 0) expect(ids(r)).toEqual([1n, 2n, 3n]);
  }, 240_000);

  it('a template the installed PGlite does not open is discarded and the directory made by initdb', async () => {
    // A data directory of another PostgreSQL major version: PostgreSQL refuses it at startup.
    const unpacked = path.join(root, 'foreign');
    mkdirSync(unpacked);
    untar(ARCHIVE, unpacked);
    writeFileSync(path.join(unpacked, 'PG_VERSION'), '99\n');
    const foreign = path.join(root, 'foreign.tar.gz');
    execFileSync('tar', ['-czf', foreign, '-C', unpacked, '.']);

    const d = project('d');
    expect(ids(await next(d, { IDLEASE_PGLITE_TEMPLATE: foreign }))).toEqual([1n, 2n, 3n]);
    expect(ids(await next(d, { IDLEASE_PGLITE_TEMPLATE: foreign }, 1))).toEqual([4n]);
    const made = path.join(d, '.idlease', 'pglite');
    expect(readFileSync(path.join(made, 'PG_VERSION'), 'utf8').trim()).not.toBe('99');
    expect(await inspect(made, systemIdentifier)).not.toBe(templateId);

    // IDLEASE_PGLITE_TEMPLATE=off: the memory test below runs it (initdb's peak RSS tells it apart).
  }, 240_000);

  it('IDLEASE_PGLITE_TEMPLATE naming a missing file is a typed error, nothing made', async () => {
    const f = project('f');
    const r = await next(f, { IDLEASE_PGLITE_TEMPLATE: path.join(root, 'no-such.tar.gz') });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/BAD_CONFIG.*IDLEASE_PGLITE_TEMPLATE names .*no-such\.tar\.gz, which does not exist/);
    expect(existsSync(path.join(f, '.idlease', 'pglite', 'PG_VERSION'))).toBe(false);
  }, 120_000);

  it('pglite:memory is loaded from the template too', async () => {
    const knex = connect('pglite:memory');
    try {
      const r = await knex.raw<{ rows: { id: string }[] }>('SELECT system_identifier::text AS id FROM pg_control_system()');
      expect(r.rows[0]!.id).toBe(templateId);
      // A memory database is a first open too: an install id of its own.
      const installed = await knex.raw<{ rows: { id: string }[] }>('SELECT id FROM idlease.idlease_install');
      expect(installed.rows).toHaveLength(1);
    } finally {
      await knex.destroy();
    }
  }, 120_000);
});

describe('first run memory', () => {
  /** Peak RSS in MB of `node bin/idlease.js next order -n 5` (the built CLI, as a user runs it) in a new project. */
  async function firstRunPeakMb(env: NodeJS.ProcessEnv): Promise<number> {
    const dir = project(`rss-${Math.random().toString(36).slice(2, 8)}`);
    const out = path.join(dir, 'time.txt');
    const r = await runNode([BUILT_BIN, 'next', 'order', '-n', '5'], {
      cwd: dir,
      env: { IDLEASE_URL: undefined, DATABASE_URL: undefined, ...env },
      timeoutMs: 120_000,
      wrap: [GNU_TIME, '-f', '%M', '-o', out],
    });
    expect(ids(r)).toEqual([1n, 2n, 3n, 4n, 5n]);
    return Number(readFileSync(out, 'utf8').trim().split('\n').at(-1)) / 1024;
  }

  it('a first run stays within 400 MB of peak RSS; initdb (the template off) does not', async () => {
    if (!existsSync(GNU_TIME)) throw new Error(`${GNU_TIME} (GNU time) reads the peak RSS: run \`npm run db:up\` or apt-get install time`);
    if (!existsSync(path.join(REPO_ROOT, 'dist/src/cli/main.js'))) throw new Error('dist/ is missing: run `npm run build`');
    const shipped = await firstRunPeakMb({});
    const initdb = await firstRunPeakMb({ IDLEASE_PGLITE_TEMPLATE: 'off' });
    expect(shipped, `first run ${Math.round(shipped)} MB, initdb ${Math.round(initdb)} MB`).toBeLessThanOrEqual(400);
    expect(initdb).toBeGreaterThan(400);
  }, 240_000);
});
