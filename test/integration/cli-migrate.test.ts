import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { REPO_ROOT, runCli, TSX_LOADER } from '../helpers/cli.js';
import { installLegacyV1 } from '../fixtures/legacy-public-v1.js';

describe('idlease migrate (CLI) on the embedded default (PGlite)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('creates ./.idlease/ on first use, then is a no-op; --json is machine-readable', async () => {
    const first = await runCli(['migrate'], { cwd: dir });
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toContain('applied segments:idlease_segments');
    expect(existsSync(path.join(dir, '.idlease', 'pglite'))).toBe(true);
    const again = await runCli(['migrate', '--json'], { cwd: dir });
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({ applied: [], moved: [], direction: 'up' });
    const down = await runCli(['migrate', '--down'], { cwd: dir });
    expect(down.stdout).toContain('reverted segments:idlease_segments');
  });

  it.each([
    [['migrate', '--bogus'], /unknown option '--bogus'/],
    [['--url', 'ftp://x/y', 'migrate'], /BAD_CONFIG: Unsupported database URL scheme/],
    [['migrate', '--segments-table', 'Bad-Name'], /BAD_CONFIG: segments\.table must be/],
    [['nonsense'], /unknown command 'nonsense'/],
  ])('exits 2 with one clear line for bad input: %j', async (args, message) => {
    const res = await runCli(args, { cwd: dir });
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(message);
    expect(res.stdout).toBe('');
  });

  it('--help lists commands and examples', async () => {
    const res = await runCli(['--help'], { cwd: dir });
    expect(res.code).toBe(0);
    expect(res.stdout).toContain('migrate');
    expect(res.stdout).toContain('Examples:');
  });
});

/** Where idlease's tables are: schema idlease on PostgreSQL, the connection's database on MySQL. */
const own = (db: TestDb) => (db.flavor === 'mysql' ? db.knex.schema : db.knex.schema.withSchema('idlease'));

describe.each(['mysql', 'postgres'] as const)('two idlease migrate processes at once on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'cli_migrate');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('both exit 0 and the table is installed once', async () => {
    const results = await Promise.all([1, 2, 3].map(() => runCli(['--url', db.url, 'migrate', '--json'])));
    for (const r of results) expect(r.code, r.stderr).toBe(0);
    const applied = results.flatMap((r) => (JSON.parse(r.stdout) as { applied: string[] }).applied);
    expect(applied).toEqual(['segments:idlease_segments']);
    expect(await own(db).hasTable('idlease_segments')).toBe(true);
  });

  it('knex CLI with the project knexfile migrates into idlease_migrations and rolls back', async () => {
    const env = {
      ...process.env,
      NODE_OPTIONS: `--import ${TSX_LOADER}`,
      [flavor === 'mysql' ? 'IDLEASE_MYSQL_URL' : 'IDLEASE_PG_URL']: db.url,
    };
    const knexCli = (args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = spawn(
          process.execPath,
          [
            path.join(REPO_ROOT, 'node_modules/knex/bin/cli.js'),
            ...args,
            '--knexfile',
            path.join(REPO_ROOT, 'knexfile.ts'),
            '--env',
            flavor,
          ],
          { cwd: REPO_ROOT, env },
        );
        let out = '';
        child.stdout.on('data', (d: Buffer) => (out += d));
        child.stderr.on('data', (d: Buffer) => (out += d));
        child.on('close', (code) => resolve({ code, out }));
      });
    const up = await knexCli(['migrate:latest']);
    expect(up.code, up.out).toBe(0);
    // The bookkeeping is where the knexfile puts it (knex does not create schemas); the tables in idlease's own.
    const names = await db.knex('idlease_migrations').pluck('name');
    expect(names).toContain('20261122000001_segments.ts');
    expect(names).toContain('20261123000004_workers.ts');
    expect(await own(db).hasTable('idlease_workers')).toBe(true);
    const down = await knexCli(['migrate:rollback', '--all']);
    expect(down.code, down.out).toBe(0);
    expect(await own(db).hasTable('idlease_segments')).toBe(false);
    expect(await own(db).hasTable('idlease_workers')).toBe(false);
    // Down removes what up created: no ticket scheme table left behind.
    expect(await own(db).hasTable('idlease_ticket_schemes')).toBe(false);
  });
});

describe('idlease migrate (CLI) on a database an idlease 0.1 migrated (PostgreSQL)', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'cli_migrate_legacy');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('says what it moved, then that nothing is left to do', async () => {
    await installLegacyV1(db.knex);
    const first = await runCli(['--url', db.url, 'migrate', '--workers', '--tickets', '--next-id']);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout.split('\n')).toContain('moved public.idlease_segments to idlease.idlease_segments');
    expect(first.stdout).toContain('moved public.idlease_migrations to idlease.idlease_migrations');
    expect(first.stdout).not.toContain('applied');
    const again = await runCli(['--url', db.url, 'migrate', '--json']);
    expect(JSON.parse(again.stdout)).toEqual({ applied: [], moved: [], direction: 'up' });
  });
});
