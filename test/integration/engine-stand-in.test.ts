/**
 * The engine is asked of the server, once per handle, and the code above src/dialects/ only asks
 * the engine's members. Two proofs on the real servers:
 * - each server this machine runs is recognized as what it is, with one `version()` round trip per
 *   handle however many executors and transactions the handle makes;
 * - a stand-in engine added the way a new one is (registerEngine, src/dialects/ only: no file of
 *   idlease above it changes) serves migrate and segment leases on a real PostgreSQL and PGlite:
 *   its `defaultSchema` of its own is where migrate installs, which only a plan that asks the
 *   engine, not the driver, can do;
 * - a server no engine recognizes is refused at every entry point (migrate, an allocator, an admin
 *   call on a pool, the CLI) with BAD_CONFIG naming what it is, before any statement of idlease's
 *   runs on it. The server is a real PostgreSQL whose `version()` answers as CockroachDB's does: a
 *   function of that name ahead of pg_catalog in its database's search_path.
 */
import knexFactory, { type Knex } from 'knex';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { engineOf, engineOfFamily, registerEngine, type Engine } from '../../src/dialects/engine.js';
import { knexExecutor } from '../../src/drivers/knex.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator, listTags } from '../../src/segment/index.js';
import { runCli } from '../helpers/cli.js';
import { ALL_FLAVORS, createTestDb, type TestDb, type TestFlavor } from '../helpers/db.js';

/** The engine each test server is, by its members. */
const EXPECTED: Record<TestFlavor, Partial<Engine>> = {
  mysql: { name: 'MariaDB', namespaces: 'database', nextId: 'ticker', ticketCounter: 'table', supportsNoPadCollation: true },
  postgres: { name: 'PostgreSQL', namespaces: 'schema', defaultSchema: 'idlease', nextId: 'function', ticketCounter: 'sequence' },
  pglite: { name: 'PGlite', namespaces: 'schema', defaultSchema: 'idlease', nextId: 'function', embedded: true },
};

/** How many statements a knex handle ran that ask the server's version. */
function countVersionQueries(knex: Knex): () => number {
  let n = 0;
  knex.on('query', (q: { sql?: string }) => {
    if (/^SELECT version\(\)$/i.test(q.sql ?? '')) n++;
  });
  return () => n;
}

describe.each(ALL_FLAVORS)('the engine of %s, asked of the server', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'engine');
  });
  afterAll(async () => {
    await db.drop();
  });

  it('is recognized by its version string, with one round trip per handle', async () => {
    const versions = countVersionQueries(db.knex);
    const engine = await engineOf(knexExecutor(db.knex));
    expect(engine).toMatchObject(EXPECTED[flavor]);
    expect(engine.version).toMatch(flavor === 'mysql' ? /MariaDB/ : /^PostgreSQL \d/);
    // Other executors of the same handle, a transaction's among them, and migrate: no second ask.
    await knexExecutor(db.knex).run('SELECT 1', []);
    await knexExecutor(db.knex).transaction((tx) => tx.run('SELECT 1', []));
    await migrate(db.knex);
    expect(await engineOf(knexExecutor(db.knex))).toBe(engine);
    expect(versions()).toBe(1);
  });
});

describe.each(['postgres', 'pglite'] as const)('a stand-in engine on %s', (flavor) => {
  const SCHEMA = 'standin_ids';
  // A pg-like engine of its own: recognizes the server before the built-in ones, and keeps
  // idlease's tables in a schema no built-in engine uses.
  const standIn: Engine = Object.freeze({
    ...engineOfFamily(flavor),
    name: 'StandIn',
    recognizes: (version: string) => /^PostgreSQL \d/.test(version),
    defaultSchema: SCHEMA,
  });
  let unregister: (() => void) | undefined;
  let db: TestDb;
  let knex: Knex;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'standin');
    unregister = registerEngine(standIn);
    // A handle made after the registration: the engine is learned once per handle.
    knex = flavor === 'pglite' ? db.knex : connect(db.url, { poolMax: 4 });
  });
  afterAll(async () => {
    unregister?.();
    if (knex !== db.knex) await knex.destroy();
    await db.drop();
  });

  it('serves migrate and segment leases, and the plan follows its members', async () => {
    const engine = await engineOf(knexExecutor(knex));
    expect(engine.name).toBe('StandIn');
    const result = await migrate(knex);
    expect(result.applied.length).toBeGreaterThan(0);
    const where = await knex.raw(
      `SELECT table_schema FROM information_schema.tables WHERE table_name = 'idlease_segments' ORDER BY table_schema`,
    );
    expect((where as { rows: Array<{ table_schema: string }> }).rows.map((r) => r.table_schema)).toEqual([SCHEMA]);

    await addTag(knex, { tag: 'order', schema: SCHEMA, start: 1000n, step: 10 });
    const a = createSegmentAllocator({ knex, tag: 'order', schema: SCHEMA, minStep: 10, maxStep: 10 });
    const b = createSegmentAllocator({ knex, tag: 'order', schema: SCHEMA, minStep: 10, maxStep: 10 });
    const ids = [...(await a.nextBatch(25)), ...(await b.nextBatch(25)), ...(await a.nextBatch(25))];
    await Promise.all([a.close(), b.close()]);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.every((id) => id >= 1000n)).toBe(true);
    // Migrating again through the stand-in finds everything in its schema: nothing to do.
    expect((await migrate(knex)).applied).toEqual([]);
  });
});

describe('a server no engine recognizes', () => {
  const COCKROACH = 'CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)';
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'cockroach');
    const name = new URL(db.url).pathname.slice(1);
    await db.knex.raw('CREATE SCHEMA face');
    await db.knex.raw(`CREATE FUNCTION face.version() RETURNS text LANGUAGE sql AS $$ SELECT '${COCKROACH}'::text $$`);
    await db.knex.raw(`ALTER DATABASE "${name}" SET search_path = face, pg_catalog, public`);
  });
  afterAll(async () => {
    await db.drop();
  });

  const refusal = { code: 'BAD_CONFIG', message: expect.stringMatching(/not PostgreSQL \(version\(\) says 'CockroachDB CCL/) };

  it('is refused by migrate, an allocator and an admin call on a pool, and nothing is installed', async () => {
    // knex's own pg client parses version() on its first connection (to pick json or text columns)
    // and throws a TypeError on an answer that is not PostgreSQL's, before any statement of
    // idlease's: a knex that names its server version (`version` in its config) skips that.
    const knex = knexFactory({ client: 'pg', connection: db.url, version: '15', pool: { min: 0, max: 2 } });
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      await expect(migrate(knex)).rejects.toMatchObject(refusal);
      const a = createSegmentAllocator({ pool, tag: 'order' });
      await expect(a.next()).rejects.toMatchObject(refusal);
      await a.close();
      await expect(listTags(pool)).rejects.toMatchObject(refusal);
      const tables = await db.knex.raw(`SELECT count(*)::int AS n FROM information_schema.tables WHERE table_name LIKE 'idlease%'`);
      expect((tables as { rows: Array<{ n: number }> }).rows[0]!.n).toBe(0);
    } finally {
      await Promise.all([knex.destroy(), pool.end()]);
    }
  });

  it('is refused by the CLI in one line, exit 2, and by a knex from connect()', async () => {
    const res = await runCli(['--url', db.url, 'migrate']);
    expect(res.stderr, res.stderr).toMatch(
      /^idlease: BAD_CONFIG: idlease refused this server: this server is not PostgreSQL \(version\(\) says 'CockroachDB[^\n]+\n$/,
    );
    expect(res.code, res.stderr).toBe(2);
    const knex = connect(db.url, { poolMax: 2 });
    try {
      await expect(migrate(knex)).rejects.toMatchObject(refusal);
    } finally {
      await knex.destroy();
    }
  });
});
