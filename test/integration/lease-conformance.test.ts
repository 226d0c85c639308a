/**
 * One lease rule (src/segment/lease.ts), two mechanisms: the segment allocator and the Redis
 * sequence lease from the same row through it, so every lease outcome must come out of both with
 * the same code within the same bound — on MariaDB, PostgreSQL and PGlite, Redis being a private
 * redis-server. Before the rule was shared, a fenced row near 2^63 (a promoted standby's copy, or a
 * row inserted by hand) was EXHAUSTED at once from the segment allocator and a DB_UNAVAILABLE after
 * the whole waitTimeoutMs from the Redis sequence.
 *
 * Bounds: "at once" is well under waitTimeoutMs (10 s here; the refusals take a few statements);
 * "waits" is the caller's waitTimeoutMs (1.5 s here) and not much more.
 */
import knexFactory, { type Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FLAVORS, createTestDb, ownTable, type TestDb, type TestFlavor } from '../helpers/db.js';
import { nodeRedisOn, startRedis, type RedisServer } from '../helpers/redis.js';
import { closedPort } from '../helpers/cli.js';
import { knexConfig } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import { createSegmentAllocator } from '../../src/segment/allocator.js';
import { createRedisSequence } from '../../src/redis-sequence/index.js';
import { MAX_INT64 } from '../../src/ids.js';

const MECHANISMS = ['segment', 'redis'] as const;
type Mechanism = (typeof MECHANISMS)[number];

/** What a lease outcome looks like from a caller. */
interface Drawer {
  next(): Promise<bigint>;
  close(): Promise<void>;
}

const AT_ONCE_WAIT_MS = 10_000;
const WAIT_MS = 1_500;

let redis: RedisServer;

beforeAll(async () => {
  redis = await startRedis('none');
});
afterAll(async () => {
  await redis?.destroy();
});

/** The caller's first answer: an ID or an error, and how long it took. */
async function first(d: Drawer): Promise<{ id?: bigint; error?: unknown; ms: number }> {
  const t0 = performance.now();
  try {
    const id = await d.next();
    return { id, ms: performance.now() - t0 };
  } catch (error) {
    return { error, ms: performance.now() - t0 };
  }
}

describe.each(ALL_FLAVORS)('the lease rule on %s', (flavor: TestFlavor) => {
  let db: TestDb;
  const cleanup: Array<() => unknown> = [];
  const segments = () => ownTable(flavor, 'idlease_segments');
  beforeAll(async () => {
    db = await createTestDb(flavor, 'leaserule');
    await migrate(db.knex);
  });
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c();
    await db?.drop();
  });

  async function open(
    mechanism: Mechanism,
    tag: string,
    extra: { knex?: Knex; waitTimeoutMs?: number; create?: { start: bigint; step: number }; owner?: string } = {},
  ): Promise<Drawer> {
    const common = {
      knex: extra.knex ?? db.knex,
      tag,
      minStep: 10,
      maxStep: 10,
      retryMaxMs: 200,
      waitTimeoutMs: extra.waitTimeoutMs ?? AT_ONCE_WAIT_MS,
      ...(extra.create ? { create: extra.create } : {}),
    };
    const d: Drawer =
      mechanism === 'segment'
        ? createSegmentAllocator(common)
        : createRedisSequence({
            ...common,
            redis: await nodeRedisOn(redis.port, cleanup),
            keyPrefix: `lease:${flavor}:`,
            ...(extra.owner ? { owner: extra.owner } : {}),
          });
    cleanup.push(() => d.close());
    return d;
  }

  const mark = (tag: string, instance: string) => db.knex.raw(`UPDATE ${segments()} SET instance = ? WHERE tag = ?`, [instance, tag]);

  it.each(MECHANISMS)('%s: an unknown tag is UNKNOWN_TAG at once, naming how to add it', async (m) => {
    const r = await first(await open(m, `nope-${m}`));
    expect(r.error).toMatchObject({ code: 'UNKNOWN_TAG', message: expect.stringMatching(/idlease tag add/) });
    expect(r.ms).toBeLessThan(AT_ONCE_WAIT_MS / 2);
  });

  it.each(MECHANISMS)('%s: create makes the row, and the first ID is its start', async (m) => {
    const r = await first(await open(m, `made-${m}`, { create: { start: 1000n, step: 10 } }));
    expect(r.error).toBeUndefined();
    expect(r.id).toBe(1000n);
  });

  it.each(MECHANISMS)('%s: a row three IDs below 2^63 − 1 hands out those three, then EXHAUSTED at once', async (m) => {
    const tag = `full-${m}`;
    await addTag(db.knex, { tag, start: (MAX_INT64 - 2n).toString(), step: 10 });
    const d = await open(m, tag);
    const ids = [await d.next(), await d.next(), await d.next()];
    expect(ids).toEqual([MAX_INT64 - 2n, MAX_INT64 - 1n, MAX_INT64]);
    const r = await first(d);
    expect(r.error).toMatchObject({ code: 'EXHAUSTED' });
    expect(r.ms).toBeLessThan(AT_ONCE_WAIT_MS / 2);
  });

  it.each(MECHANISMS)('%s: a row last leased on another instance jumps past its failover gap once', async (m) => {
    const tag = `jump-${m}`;
    await addTag(db.knex, { tag, start: '5001', step: 10, failoverGap: 1_000_000 });
    await mark(tag, 'old-primary');
    const d = await open(m, tag);
    expect(await d.next()).toBe(2_000_001n);
    expect(await d.next()).toBe(2_000_002n);
  });

  it.each(MECHANISMS)('%s: the same row fenced near 2^63 − 1 is EXHAUSTED at once, never a wait', async (m) => {
    const tag = `top-${m}`;
    await addTag(db.knex, { tag, start: (MAX_INT64 - 4n).toString(), step: 10 });
    await mark(tag, 'old-primary');
    const r = await first(await open(m, tag));
    expect(r.error).toMatchObject({ code: 'EXHAUSTED', message: expect.stringMatching(/failover jump/) });
    expect(r.ms).toBeLessThan(AT_ONCE_WAIT_MS / 2);
  });

  it.each(MECHANISMS)('%s: a row that went back below a lease is INVARIANT; nothing is handed out twice', async (m) => {
    const tag = `back-${m}`;
    await addTag(db.knex, { tag, step: 10 });
    const d = await open(m, tag);
    const ids = [await d.next()];
    // A restore, or a standby that missed the last leases, on the same instance.
    await db.knex.raw(`UPDATE ${segments()} SET max_id = 0 WHERE tag = ?`, [tag]);
    let error: unknown;
    for (let i = 0; i < 100 && error === undefined; i++) {
      const r = await first(d);
      if (r.error !== undefined) error = r.error;
      else ids.push(r.id!);
    }
    expect(error).toMatchObject({ code: 'INVARIANT', message: expect.stringMatching(/went backwards/) });
    expect(new Set(ids.map(String)).size).toBe(ids.length);
  });

  // PGlite is in the process: it is never down, and never a standby.
  const SERVERS_ONLY = flavor === 'pglite' ? [] : MECHANISMS;
  for (const m of SERVERS_ONLY) {
    it(`${m}: a database that is down is DB_UNAVAILABLE after waitTimeoutMs`, async () => {
      const url = new URL(db.url);
      url.port = String(await closedPort());
      const down = knexFactory(knexConfig(url.toString(), { poolMax: 2 }));
      cleanup.push(() => down.destroy());
      const r = await first(await open(m, 'order', { knex: down, waitTimeoutMs: WAIT_MS, owner: `down/${flavor}` }));
      expect(r.error, String(r.error)).toMatchObject({ code: 'DB_UNAVAILABLE' });
      expect(r.ms).toBeGreaterThanOrEqual(WAIT_MS - 50);
      expect(r.ms).toBeLessThan(WAIT_MS + 3_000);
    });

    it(`${m}: a read-only server is DB_UNAVAILABLE after waitTimeoutMs, saying read-only`, async () => {
      const tag = `ro-${m}`;
      await addTag(db.knex, { tag, step: 10 });
      const config = knexConfig(db.url, { poolMax: 2 });
      const sql = flavor === 'mysql' ? 'SET SESSION TRANSACTION READ ONLY' : 'SET default_transaction_read_only = on';
      const ro = knexFactory({
        ...config,
        pool: {
          ...(config.pool ?? {}),
          afterCreate(conn: { query(sql: string, cb: (err: Error | null) => void): void }, done: (e: Error | null, c: unknown) => void) {
            conn.query(sql, (err) => done(err, conn));
          },
        },
      });
      cleanup.push(() => ro.destroy());
      const r = await first(await open(m, tag, { knex: ro, waitTimeoutMs: WAIT_MS }));
      expect(r.error, String(r.error)).toMatchObject({ code: 'DB_UNAVAILABLE', message: expect.stringMatching(/read.only/i) });
      expect(r.ms).toBeGreaterThanOrEqual(WAIT_MS - 50);
      expect(r.ms).toBeLessThan(WAIT_MS + 3_000);
    });
  }
});
