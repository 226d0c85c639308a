import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { REPO_ROOT, runCli, TSX_LOADER } from '../helpers/cli.js';
import { installLegacyV1 } from '../fixtures/legacy-public-v1.js';
import { migrate } from '../../src/migrations/migrate.js';

describe('idlease migrate (CLI) on the embedded default (PGlite)', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('creates ./.idlease/ on first use, already migrated (the shipped template), then is a no-op; --json is machine-readable', async () => {
    const first = await runCli(['migrate'], { cwd: dir });
    expect(first.stderr).toMatch(/^idlease: created a new embedded database in \.\/\.idlease\/pglite\/ [^\n]+\n$/);
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/^nothing to do on .*: already up to date\n$/);
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
/** The is_locked column of knex's lock table, one entry per row. */
const lockRows = async (db: TestDb) =>
  (await db.knex(db.flavor === 'mysql' ? 'idlease_migrations_lock' : 'idlease.idlease_migrations_lock').pluck('is_locked')).map(Number);

describe.each(['mysql', 'postgres'] as const)('two idlease migrate processes at once on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'cli_migrate');
  });
  afterAll(async () => {
    await db?.drop();
  });

  // knex makes its lock row by "SELECT, then INSERT if empty": on a new database two racers
  // could both insert, and with two rows knex's lock never changes exactly one row again, so
  // every migration after waited out its lock timeout (1 round in ~6 on MariaDB here). Several
  // rounds on new databases, each ending with one lock row.
  it('all exit 0, the table is installed once and knex keeps one lock row (4 new databases)', async () => {
    for (let round = 0; round < 4; round++) {
      const fresh = round === 0 ? db : await createTestDb(flavor, `cli_migrate_r${round}`);
      try {
        const results = await Promise.all([1, 2, 3].map(() => runCli(['--url', fresh.url, 'migrate', '--json'], { timeoutMs: 30_000 })));
        for (const r of results) expect(r.code, `round ${round}: ${r.stderr}`).toBe(0);
        const applied = results.flatMap((r) => (JSON.parse(r.stdout) as { applied: string[] }).applied);
        expect(applied).toEqual([
          'segments:idlease_segments',
          'segments:idlease_segments:v2',
          'segments:idlease_segments:v3',
          // MySQL/MariaDB: the tag column NO PAD binary (issue 38, item 5).
          ...(flavor === 'mysql' ? ['segments:idlease_segments:v3-nopad'] : []),
          'install:idlease_install',
        ]);
        expect(await own(fresh).hasTable('idlease_segments')).toBe(true);
        expect(await lockRows(fresh), `round ${round}`).toEqual([0]);
      } finally {
        if (fresh !== db) await fresh.drop();
      }
    }
  });

  it('a lock table an earlier race left with two rows is cut back to one, and migrate goes on', async () => {
    const broken = await createTestDb(flavor, 'cli_migrate_broken');
    try {
      // The state knex's race leaves: its lock table, two unlocked rows.
      const lockTable = flavor === 'mysql' ? 'idlease_migrations_lock' : 'idlease.idlease_migrations_lock';
      if (flavor === 'postgres') await broken.knex.raw('CREATE SCHEMA idlease');
      await broken.knex.schema.createTable(lockTable, (t) => {
        t.increments('index').primary();
        t.integer('is_locked');
      });
      await broken.knex(lockTable).insert([{ is_locked: 0 }, { is_locked: 0 }]);
      const res = await migrate(broken.knex, { lockTimeoutMs: 3000 });
      expect(res.applied).toEqual([
        'segments:idlease_segments',
        'segments:idlease_segments:v2',
        'segments:idlease_segments:v3',
        // MySQL/MariaDB: the tag column NO PAD binary (issue 38, item 5).
        ...(flavor === 'mysql' ? ['segments:idlease_segments:v3-nopad'] : []),
        'install:idlease_install',
      ]);
      expect(await lockRows(broken)).toEqual([0]);
    } finally {
      await broken.drop();
    }
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
    expect(names).toContain('20261125000001_install.ts');
    expect(await own(db).hasTable('idlease_segments')).toBe(true);
    // What `idlease migrate` installs and nothing else: the worker table, tickets and next_id() are opt-in directories.
    expect(names).not.toContain('20261123000004_workers.ts');
    expect(await own(db).hasTable('idlease_workers')).toBe(false);
    expect(await own(db).hasTable('idlease_ticket_schemes')).toBe(false);
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
    // Only what 0.1 never had: the worker table's instance marker (issue 24).
    expect(first.stdout.split('\n').filter((l) => l.startsWith('applied'))).toEqual([
      'applied segments:idlease_segments:v2',
      'applied segments:idlease_segments:v3',
      'applied install:idlease_install',
      'applied tickets:default:v2',
      'applied workers:idlease_workers:v2',
    ]);
    const again = await runCli(['--url', db.url, 'migrate', '--json']);
    expect(JSON.parse(again.stdout)).toEqual({ applied: [], moved: [], direction: 'up' });
  });
});
