/**
 * The Redis sequence's second pass: a key bound to the database row it issues for (two databases,
 * two tables, one Redis, one tag), an idlease 0.2 key adopted, a key of another type, every call
 * settling within its own bound whatever its place in the queue (REDIS_UNAVAILABLE or
 * DB_UNAVAILABLE by cause), and windows that follow the rate flat out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { ioRedisOn, nodeRedisOn, startRedis, type RedisServer } from '../helpers/redis.js';
import { closedPort, runCli } from '../helpers/cli.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import { createSegmentAllocator } from '../../src/segment/allocator.js';
import { createKnexSegmentStore } from '../../src/segment/store.js';
import { createRedisSequence, redisKeyStatus, type RedisSequence } from '../../src/redis-sequence/index.js';

let server: RedisServer;
let pg: TestDb;
let pg2: TestDb;
let my: TestDb;
const cleanup: Array<() => unknown> = [];

beforeAll(async () => {
  server = await startRedis('none');
  [pg, pg2, my] = await Promise.all([
    createTestDb('postgres', 'redisbound'),
    createTestDb('postgres', 'redisbound2'),
    createTestDb('mysql', 'redisbound'),
  ]);
  for (const d of [pg, pg2, my]) await migrate(d.knex);
  // A second segment table in the first database: same install, another row for the same tag.
  await migrate(pg.knex, { segments: { table: 'other_segments' } });
});

afterAll(async () => {
  for (const c of cleanup.reverse()) await c();
  await server?.destroy();
  for (const d of [pg, pg2, my]) await d?.drop();
});

const nodeRedis = (port = server.port) => nodeRedisOn(port, cleanup);
const ioRedis = (port = server.port) => ioRedisOn(port, cleanup);

function track(s: RedisSequence): RedisSequence {
  cleanup.push(() => s.close());
  return s;
}

/** IDs a sequence hands out in `calls` calls, stopping at the first refusal (returned with them). */
async function draw(seq: RedisSequence, calls: number): Promise<{ ids: bigint[]; error: unknown }> {
  const ids: bigint[] = [];
  try {
    for (let i = 0; i < calls; i++) ids.push(await seq.next());
  } catch (error) {
    return { ids, error };
  }
  return { ids, error: undefined };
}

describe('a key belongs to one database row', () => {
  it('two databases and two tables share one Redis and one tag: 0 repeats within any of them, the others refused with BAD_CONFIG naming keyPrefix', async () => {
    const tag = 'order';
    const rows = [
      { name: 'PostgreSQL A', knex: pg.knex, table: undefined },
      { name: 'PostgreSQL B', knex: pg2.knex, table: undefined },
      { name: 'MariaDB', knex: my.knex, table: undefined },
      { name: 'PostgreSQL A, table other_segments', knex: pg.knex, table: 'other_segments' },
    ];
    for (const r of rows) await addTag(r.knex, { tag, step: 1000, ...(r.table ? { table: r.table } : {}) });
    // The first database's sequence takes the key and issues 1…5.
    const first = track(createRedisSequence({ redis: await nodeRedis(), knex: rows[0]!.knex, tag }));
    const a = await draw(first, 5);
    expect(a.error).toBeUndefined();
    expect(a.ids).toEqual([1n, 2n, 3n, 4n, 5n]);
    const repeats: Record<string, number> = {};
    const errors: Array<[string, unknown]> = [];
    for (const r of rows.slice(1)) {
      // Each other row hands out 1…3000 with a segment allocator of its own, then a Redis sequence on it
      // (same Redis, same default key prefix) is asked for five more.
      const seg = createSegmentAllocator({ knex: r.knex, tag, ...(r.table ? { table: r.table } : {}), minStep: 1000, maxStep: 1000 });
      const own = new Set(await seg.nextBatch(3000));
      await seg.close();
      for (const redis of [await nodeRedis(), ioRedis()]) {
        const seq = track(createRedisSequence({ redis, knex: r.knex, tag, ...(r.table ? { table: r.table } : {}) }));
        const b = await draw(seq, 5);
        repeats[r.name] = (repeats[r.name] ?? 0) + b.ids.filter((id) => own.has(id)).length;
        errors.push([r.name, b.error]);
        // Refused for good, and at once: the next call does not wait.
        errors.push([r.name, await seq.next().catch((e: unknown) => e)]);
      }
    }
    expect(repeats).toEqual({ 'PostgreSQL B': 0, MariaDB: 0, 'PostgreSQL A, table other_segments': 0 });
    for (const [name, error] of errors)
      expect(error, name).toMatchObject({
        code: 'BAD_CONFIG',
        message: expect.stringMatching(/belongs to another database row.*keyPrefix/),
      });
    // The owner goes on issuing from its key, untouched by the refusals.
    expect(await first.next()).toBe(6n);
    // With a key prefix of its own, the second database issues above its own row.
    const own = track(createRedisSequence({ redis: ioRedis(), knex: pg2.knex, tag, keyPrefix: 'b:' }));
    expect(await own.next()).toBe(3001n);
    const status = await redisKeyStatus(await nodeRedis(), tag);
    expect(status.owner).toMatch(/^[0-9a-f-]{36}\/idlease\.idlease_segments\/order$/);
  });

  it('the owner survives a Redis restart from its RDB file (the key comes back stale, still bound)', async () => {
    const own = await startRedis('rdb');
    cleanup.push(() => own.destroy());
    await addTag(pg.knex, { tag: 'rdb-bound', step: 100 });
    await addTag(my.knex, { tag: 'rdb-bound', step: 100 });
    const a = track(createRedisSequence({ redis: await nodeRedis(own.port), knex: pg.knex, tag: 'rdb-bound' }));
    expect(await a.next()).toBe(1n);
    await own.command('SAVE');
    await own.kill();
    await own.start();
    const other = track(createRedisSequence({ redis: await nodeRedis(own.port), knex: my.knex, tag: 'rdb-bound' }));
    await expect(other.next()).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    const again = track(createRedisSequence({ redis: await nodeRedis(own.port), knex: pg.knex, tag: 'rdb-bound' }));
    expect(await again.next()).toBeGreaterThan(100n); // re-seeded above the row: the restored window is never issued from
  });

  it('a key of idlease 0.2 (no owner) is adopted: its window is dropped unissued, its high-water mark kept', async () => {
    const tag = 'legacy';
    await addTag(pg.knex, { tag, step: 100 });
    // What 0.2 left: the row leased to 1000, and a live window (0, 1000] with 5 issued, on this very
    // incarnation, with no owner.
    expect(await createKnexSegmentStore(pg.knex).lease(tag, 1000)).toEqual({ kind: 'leased', end: 1000n });
    const redis = await nodeRedis();
    const info = String(await redis.sendCommand(['INFO', 'server', 'replication']));
    const me = `${/run_id:(\w+)/.exec(info)![1]}/${/master_replid:(\w+)/.exec(info)![1]}`;
    await redis.sendCommand(['HSET', `idlease:seq:{${tag}}`, 'inc', me, 'base', '0', 'size', '1000', 'off', '5', 'hi', '1000']);
    const seq = track(createRedisSequence({ redis, knex: pg.knex, tag }));
    // Not 6 from the adopted window (whose row it cannot know): a new window above the row.
    expect(await seq.next()).toBe(1001n);
    const status = await redisKeyStatus(redis, tag);
    expect(status.owner).toMatch(/\/idlease\.idlease_segments\/legacy$/);
    expect(status.high).toBeGreaterThanOrEqual(1000n);
  });

  it('a key of another type under the name: BAD_CONFIG at once, never "did not answer"', async () => {
    await addTag(pg.knex, { tag: 'taken', step: 100 });
    const redis = await nodeRedis();
    await redis.sendCommand(['SET', 'idlease:seq:{taken}', 'somebody else']);
    for (const client of [redis, ioRedis()]) {
      const seq = track(createRedisSequence({ redis: client, knex: pg.knex, tag: 'taken', waitTimeoutMs: 30_000 }));
      const t0 = Date.now();
      await expect(seq.next()).rejects.toMatchObject({ code: 'BAD_CONFIG', message: expect.stringMatching(/not a hash.*keyPrefix/) });
      expect(Date.now() - t0).toBeLessThan(30_000);
    }
  });
});

describe('every call settles within its own bound', () => {
  const waitTimeoutMs = 1_500;
  const commandTimeoutMs = 400;

  /** Calls started at staggered times; each one's time from its own start to its end, and its error. */
  async function staggered(seq: RedisSequence, starts: number[]) {
    return Promise.all(
      starts.map(async (at, i) => {
        await new Promise((r) => setTimeout(r, at));
        const t0 = performance.now();
        const p = i % 3 === 2 ? seq.nextBatch(10) : seq.next();
        const error = await p.then(
          () => undefined,
          (e: unknown) => e,
        );
        return { ms: performance.now() - t0, error: error as { code?: string } | undefined };
      }),
    );
  }

  it.each(['node-redis', 'ioredis'] as const)(
    'Redis stopped (%s): calls queued behind others still end within waitTimeoutMs + one command, REDIS_UNAVAILABLE',
    async (kind) => {
      const own = await startRedis('none');
      cleanup.push(() => own.destroy());
      await addTag(pg.knex, { tag: `down-${kind}`, step: 100 });
      const redis = kind === 'ioredis' ? ioRedis(own.port) : await nodeRedis(own.port);
      const seq = track(createRedisSequence({ redis, knex: pg.knex, tag: `down-${kind}`, waitTimeoutMs, commandTimeoutMs }));
      await seq.next();
      await own.kill();
      const results = await staggered(seq, [0, 0, 0, 300, 600, 900, 1200, 1200, 1500]);
      for (const r of results) {
        expect(r.error?.code).toBe('REDIS_UNAVAILABLE');
        expect(r.ms).toBeLessThanOrEqual(waitTimeoutMs + commandTimeoutMs + 150);
      }
    },
  );

  it('the database unreachable: DB_UNAVAILABLE within the bound, Redis named nowhere as the cause', async () => {
    const port = await closedPort();
    const dead = connect(`postgres://postgres@127.0.0.1:${port}/test`);
    cleanup.push(() => dead.destroy());
    // With the owner given, the key binds without the database; the first window cannot be leased.
    const seq = track(
      createRedisSequence({
        redis: await nodeRedis(),
        knex: dead,
        tag: 'nodb',
        owner: 'dead-db/idlease_segments/nodb',
        waitTimeoutMs,
        commandTimeoutMs,
      }),
    );
    const results = await staggered(seq, [0, 0, 300, 900, 1400]);
    for (const r of results) {
      expect(r.error?.code).toBe('DB_UNAVAILABLE');
      expect(r.ms).toBeLessThanOrEqual(waitTimeoutMs + commandTimeoutMs + 150);
    }
    // Without an owner the install id cannot be read either: DB_UNAVAILABLE, within the bound.
    const unbound = track(createRedisSequence({ redis: await nodeRedis(), knex: dead, tag: 'nodb', waitTimeoutMs, commandTimeoutMs }));
    const t0 = performance.now();
    await expect(unbound.next()).rejects.toMatchObject({ code: 'DB_UNAVAILABLE' });
    expect(performance.now() - t0).toBeLessThanOrEqual(waitTimeoutMs + commandTimeoutMs + 150);
  });
});

describe('windows follow the rate', () => {
  it.each(['postgres', 'mysql'] as const)(
    'flat out from a row step of 1000 (%s): at most 2 database leases per second, windows grown to last seconds',
    async (flavor) => {
      const db = flavor === 'postgres' ? pg : my;
      const tag = `flat-${flavor}`;
      await addTag(db.knex, { tag, step: 1000 });
      const seq = track(createRedisSequence({ redis: await nodeRedis(), knex: db.knex, tag }));
      const runMs = 6_000;
      const until = performance.now() + runMs;
      const served = new Set<bigint>();
      let last = 0n;
      // One caller of batches and 32 of next(): the process's ceiling on this machine.
      await Promise.all([
        (async () => {
          while (performance.now() < until) {
            const ids = await seq.nextBatch(1000);
            expect(ids[0]! > last).toBe(true);
            last = ids.at(-1)!;
            for (const id of ids) served.add(id);
          }
        })(),
        ...Array.from({ length: 32 }, async () => {
          while (performance.now() < until) served.add(await seq.next());
        }),
      ]);
      const s = seq.stats();
      expect(served.size).toBe(s.served);
      const perSecond = s.windows / (runMs / 1000);
      expect(perSecond, `${s.windows} leases in ${runMs} ms for ${s.served} IDs, last window ${s.windowSize}`).toBeLessThanOrEqual(2);
      expect(s.windowSize).toBeGreaterThan(1000);
    },
  );
});

describe('the CLI', () => {
  it('idlease redis next <tag> -n N draws from the Redis sequence, continuing across runs; --json writes strings', async () => {
    await addTag(pg.knex, { tag: 'cli-next', step: 100 });
    const args = ['--url', pg.url, 'redis', 'next', 'cli-next', '--redis-url', `redis://127.0.0.1:${server.port}`];
    const a = await runCli([...args, '-n', '3']);
    expect(a.code, a.stderr).toBe(0);
    expect(a.stdout.trim().split('\n')).toEqual(['1', '2', '3']);
    const b = await runCli(['--json', ...args, '-n', '2']);
    expect(b.code, b.stderr).toBe(0);
    expect(JSON.parse(b.stdout)).toEqual({ tag: 'cli-next', ids: ['4', '5'] });
    // The same tag from the library follows in the one order.
    const seq = track(createRedisSequence({ redis: await nodeRedis(), knex: pg.knex, tag: 'cli-next' }));
    expect(await seq.next()).toBe(6n);
  });

  it('serve --redis-url with Redis down: REDIS_UNAVAILABLE within --wait, exit 1; with a wrong password: BAD_CONFIG, exit 2; no password shown; IDLEASE_REDIS_URL is read', async () => {
    const locked = await startRedis('none', ['--requirepass', 's3cret-pass']);
    cleanup.push(() => locked.destroy());
    const down = `redis://127.0.0.1:${await closedPort()}`;
    const cases: Array<{ args: string[]; env?: NodeJS.ProcessEnv; code: number; error: string }> = [
      { args: ['--redis-url', down], code: 1, error: 'REDIS_UNAVAILABLE' },
      { args: ['--redis-url', `redis://:wrong-pass@127.0.0.1:${locked.port}`], code: 2, error: 'BAD_CONFIG' },
      { args: [], env: { IDLEASE_REDIS_URL: down }, code: 1, error: 'REDIS_UNAVAILABLE' },
    ];
    for (const c of cases) {
      const t0 = performance.now();
      const r = await runCli(['--url', pg.url, '--wait', '2', 'serve', '--port', '0', ...c.args], { env: c.env, timeoutMs: 30_000 });
      expect(r.code, r.stderr).toBe(c.code);
      expect(r.stderr).toMatch(new RegExp(c.error));
      expect(r.stderr + r.stdout).not.toMatch(/wrong-pass/);
      expect(performance.now() - t0).toBeLessThan(20_000);
    }
  });
});
