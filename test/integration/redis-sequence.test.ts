/**
 * The Redis sequence in one process against private redis-server processes and the real
 * databases: order across sequences, the database regressed, values near 2^53 and 2^63, a
 * reply lost on the wire with both clients (ioredis resends the call: a gap, never a duplicate),
 * close() giving the prefetched window back, and the classic Lua snowflake repeating IDs.
 */
import net from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { ioRedisOn, nodeRedisOn, startRedis, type RedisServer } from '../helpers/redis.js';
import { clockStep } from '../helpers/clock-step.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import { createKnexSegmentStore } from '../../src/segment/store.js';
import { createRedisSequence, redisKeyStatus, type RedisSequence } from '../../src/redis-sequence/index.js';
import { MAX_INT64 } from '../../src/ids.js';
import { RedisKey } from '../../src/redis-sequence/redis-store.js';
import { redisCommander } from '../../src/redis-sequence/client.js';
import { isIdleaseError } from '../../src/errors.js';
import { runCli } from '../helpers/cli.js';
import { startServe } from '../helpers/serve-process.js';
import { Registry } from 'prom-client';
import { collectMetrics } from '../../src/metrics/index.js';

let server: RedisServer;
const dbs: Record<string, TestDb> = {};
const cleanup: Array<() => unknown> = [];

beforeAll(async () => {
  server = await startRedis('none');
  for (const flavor of ['postgres', 'mysql'] as const) {
    dbs[flavor] = await createTestDb(flavor, 'redisseq');
    await migrate(dbs[flavor].knex);
  }
});

afterAll(async () => {
  for (const c of cleanup.reverse()) await c();
  await server?.destroy();
  for (const d of Object.values(dbs)) await d.drop();
});

const nodeRedis = (port = server.port) => nodeRedisOn(port, cleanup);
const ioRedis = (port = server.port) => ioRedisOn(port, cleanup);

describe.each(['postgres', 'mysql'] as const)('Redis sequence on %s', (flavor) => {
  it('one strictly increasing order across four sequences with their own clients, 64 callers each', async () => {
    const db = dbs[flavor]!;
    const tag = `order-${flavor}`;
    await addTag(db.knex, { tag, step: 50 });
    const seqs: RedisSequence[] = [];
    for (let i = 0; i < 4; i++) seqs.push(createRedisSequence({ redis: i % 2 ? ioRedis() : await nodeRedis(), knex: db.knex, tag }));
    // Call A ended before call B began ⇒ A's ID < B's ID: checked with one counter of events.
    let clock = 0;
    const calls: Array<{ began: number; ended: number; id: bigint }> = [];
    await Promise.all(
      seqs.flatMap((s) =>
        Array.from({ length: 64 }, async () => {
          for (let k = 0; k < 20; k++) {
            const began = clock++;
            const id = await s.next();
            calls.push({ began, ended: clock++, id });
          }
        }),
      ),
    );
    expect(new Set(calls.map((c) => c.id)).size).toBe(calls.length);
    const byEnd = [...calls].sort((a, b) => a.ended - b.ended);
    const byBegin = [...calls].sort((a, b) => a.began - b.began);
    let highestEnded = 0n;
    let j = 0;
    for (const c of byBegin) {
      for (; j < byEnd.length && byEnd[j]!.ended < c.began; j++) if (byEnd[j]!.id > highestEnded) highestEnded = byEnd[j]!.id;
      expect(c.id > highestEnded, `${c.id} began after ${highestEnded} was handed out`).toBe(true);
    }
    await Promise.all(seqs.map((s) => s.close()));
  });
});

describe('Redis sequence (PostgreSQL row)', () => {
  const db = () => dbs.postgres!;

  it('the database regressed under an intact Redis: INVARIANT naming idlease tag bump, nothing issued from the window', async () => {
    const tag = 'regress';
    await addTag(db().knex, { tag, step: 10 });
    const seq = createRedisSequence({ redis: await nodeRedis(), knex: db().knex, tag, minStep: 10, maxStep: 10, waitTimeoutMs: 2000 });
    const seen: bigint[] = [];
    for (let i = 0; i < 25; i++) seen.push(await seq.next());
    // What a failover to a replica that missed the last leases does to the row.
    const store = createKnexSegmentStore(db().knex);
    // (Retried: a prefetch may be moving the row as we read it.)
    let lowered = false;
    for (let i = 0; i < 20 && !lowered; i++) {
      await new Promise((r) => setTimeout(r, 20));
      lowered = await store.giveBack(tag, (await store.read(tag))!.maxId, 5n);
    }
    expect(lowered).toBe(true);
    let err: unknown;
    try {
      for (let i = 0; i < 100; i++) seen.push(await seq.next());
    } catch (e) {
      err = e;
    }
    expect(isIdleaseError(err, 'INVARIANT'), String(err)).toBe(true);
    expect(String((err as Error).message)).toContain(`idlease tag bump ${tag}`);
    // The message names the highest ID the key had issued when the window came back (an ID this
    // process handed out, at least the 25th), not the end of its highest window.
    const named = BigInt(/already issued IDs up to (\d+) /.exec(String((err as Error).message))![1]!);
    expect(seen).toContain(named);
    expect(named).toBeGreaterThanOrEqual(seen[24]!);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seq.stats().regressions).toBe(1);
    await seq.close();
  });

  it('the key renamed to <prefix>{<tag>} (a Cluster hash tag): the first window under the new name starts above every window the old name was given, while a process of the old version still issues from it', async () => {
    const tag = 'renamed';
    await addTag(db().knex, { tag, step: 1000 });
    const redis = await nodeRedis();
    // What the previous version leaves: its key `idlease:seq:renamed` holding a window, 5 IDs issued.
    const before = createRedisSequence({ redis, knex: db().knex, tag, minStep: 1000, maxStep: 1000 });
    const old = await before.nextBatch(5);
    await before.close();
    expect(await server.command('EXISTS', 'idlease:seq:{renamed}')).toBe(1);
    await server.command('RENAME', 'idlease:seq:{renamed}', 'idlease:seq:renamed');
    const owner = String(await server.command('HGET', 'idlease:seq:renamed', 'own'));
    const oldProcess = new RedisKey(redisCommander(redis), 'idlease:seq:renamed', 1000, undefined, owner, 'old-process');
    // This version, in another process, and the old version, drawing side by side.
    const after = createRedisSequence({ redis: ioRedis(), knex: db().knex, tag, minStep: 1000, maxStep: 1000 });
    const fresh: bigint[] = [];
    for (let i = 0; i < 50; i++) {
      fresh.push(await after.next());
      const r = await oldProcess.next(3, 0, 1000);
      if (r.kind === 'ok') old.push(...r.ids);
    }
    await after.close();
    const oldTop = old.reduce((a, b) => (a > b ? a : b));
    expect(old.length).toBeGreaterThan(5);
    expect(fresh[0]!).toBeGreaterThan(1000n);
    expect(fresh[0]!).toBeGreaterThan(oldTop);
    expect(new Set([...old, ...fresh]).size).toBe(old.length + fresh.length);
  });

  it('values around 2^53 and up to 2^63−1 are exact, then EXHAUSTED', async () => {
    const near53 = (1n << 53n) - 20n;
    await addTag(db().knex, { tag: 'big53', step: 16, start: near53 });
    const a = createRedisSequence({ redis: await nodeRedis(), knex: db().knex, tag: 'big53', minStep: 16, maxStep: 16 });
    const ids = [...(await a.nextBatch(30)), await a.next()];
    expect(ids).toEqual(Array.from({ length: 31 }, (_, i) => near53 + BigInt(i)));
    await a.close();

    await addTag(db().knex, { tag: 'big63', step: 100, start: MAX_INT64 - 199n });
    const b = createRedisSequence({ redis: ioRedis(), knex: db().knex, tag: 'big63', minStep: 100, maxStep: 100 });
    const top = await b.nextBatch(150);
    top.push(...(await b.nextBatch(50)));
    expect(top[0]).toBe(MAX_INT64 - 199n);
    expect(top.at(-1)).toBe(MAX_INT64);
    expect(new Set(top).size).toBe(200);
    await expect(b.next()).rejects.toMatchObject({ code: 'EXHAUSTED' });
    await b.close();

    // max_id at 2^63−5 with step 100: the last four IDs are issued, then EXHAUSTED, not 4 IDs early.
    await addTag(db().knex, { tag: 'last4', step: 100, start: MAX_INT64 - 4n });
    const c = createRedisSequence({ redis: await nodeRedis(), knex: db().knex, tag: 'last4', minStep: 100, maxStep: 100 });
    expect(await c.nextBatch(2)).toEqual([MAX_INT64 - 4n, MAX_INT64 - 3n]);
    // Let the prefetch meet the end of the row first: the key's last three IDs are still handed out.
    await new Promise((r) => setTimeout(r, 300));
    expect([await c.next(), await c.next(), await c.next()]).toEqual([MAX_INT64 - 2n, MAX_INT64 - 1n, MAX_INT64]);
    await expect(c.next()).rejects.toMatchObject({ code: 'EXHAUSTED' });
    await c.close();
  });

  it.each(['ioredis', 'node-redis'] as const)('a reply lost on the wire (%s): a gap, never a duplicate', async (kind) => {
    const tag = `cut-${kind}`;
    await addTag(db().knex, { tag, step: 1000 });
    const proxy = await cuttingProxy(server.port);
    cleanup.push(() => proxy.close());
    const redis = kind === 'ioredis' ? ioRedis(proxy.port) : await nodeRedis(proxy.port);
    const seq = createRedisSequence({ redis, knex: db().knex, tag, minStep: 1000, maxStep: 1000 });
    const before = await seq.next();
    const sentBefore = proxy.scriptCalls();
    proxy.dropNextReply();
    const after = await seq.next();
    const last = await seq.next();
    // The dropped call ran in Redis (its ID is a gap); the next one was a resend (ioredis) or a retry (node-redis).
    expect(after).toBe(before + 2n);
    expect(last).toBe(after + 1n);
    expect(proxy.scriptCalls() - sentBefore).toBe(3);
    const status = await redisKeyStatus(redis, tag);
    expect(status.current!.base + BigInt(status.current!.issued)).toBe(last);
    await seq.close();
  });

  it('close() gives the prefetched window back to the row', async () => {
    const tag = 'giveback';
    await addTag(db().knex, { tag, step: 100 });
    const redis = await nodeRedis();
    const seq = createRedisSequence({ redis, knex: db().knex, tag, minStep: 100, maxStep: 100 });
    for (let i = 0; i < 80; i++) await seq.next();
    // Past half of the first window the caller is elected; the second window is queued behind it.
    for (let i = 0; i < 50 && (await redisKeyStatus(redis, tag)).queued === undefined; i++) await new Promise((r) => setTimeout(r, 10));
    const store = createKnexSegmentStore(db().knex);
    // Elected with k of 100 left (k: the preload rule at the measured rate): the queued window is
    // the other 100 − k of one window (the loss bound).
    const leased = (await store.read(tag))!.maxId;
    expect(leased).toBeGreaterThan(100n);
    expect(leased).toBeLessThanOrEqual(200n);
    await seq.close();
    expect((await store.read(tag))!.maxId).toBe(100n);
    expect(seq.stats().givenBack).toBe(leased - 100n);
    // The next user starts right after the window that was used.
    const again = createRedisSequence({ redis: await nodeRedis(), knex: db().knex, tag, minStep: 100, maxStep: 100 });
    expect(await again.nextBatch(21)).toEqual(Array.from({ length: 21 }, (_, i) => 81n + BigInt(i)));
    await again.close();
  });
});

describe('the cost of a Redis loss', () => {
  it('at most one window: what the key still held plus the window queued behind it never exceed one window', async () => {
    const own = await startRedis('none');
    cleanup.push(() => own.destroy());
    const db = dbs.postgres!;
    const tag = 'lossbound';
    await addTag(db.knex, { tag, step: 100 });
    const redis = await nodeRedis(own.port);
    const seq = createRedisSequence({ redis, knex: db.knex, tag, minStep: 100, maxStep: 100 });
    let last = 0n;
    for (let i = 0; i < 60; i++) last = await seq.next();
    for (let i = 0; i < 50 && (await redisKeyStatus(redis, tag)).queued === undefined; i++) await new Promise((r) => setTimeout(r, 10));
    const before = await redisKeyStatus(redis, tag);
    expect(before.queued).toBeDefined();
    const held = BigInt(before.current!.size - before.current!.issued) + BigInt(before.queued!.size);
    expect(held).toBeLessThanOrEqual(100n);
    await own.kill();
    await own.start();
    const first = await seq.next();
    // Everything between the last ID issued and the first after the loss is the gap.
    expect(first - last - 1n).toBe(held);
    expect(first - last - 1n).toBeLessThanOrEqual(100n);
    expect(seq.stats().reseeds).toBeGreaterThan(0);
    await seq.close();
  });
});

describe('a Redis server whose clock steps', () => {
  it('the sequence stays strictly increasing and keeps leasing through steps of −1 h and +1 h (TIME only dates elections)', async () => {
    const clock = clockStep();
    const stepped = await startRedis('none', [], clock.env);
    cleanup.push(() => stepped.destroy());
    const tag = 'clockstep';
    await addTag(dbs.postgres!.knex, { tag, step: 50 });
    const seq = createRedisSequence({ redis: await nodeRedis(stepped.port), knex: dbs.postgres!.knex, tag, minStep: 50, maxStep: 50 });
    let last = 0n;
    for (const offset of [0, -3_600_000, 3_600_000, 0]) {
      clock.set(offset);
      // Four windows per step: every one needs an election, dated by the server's clock.
      for (let i = 0; i < 200; i++) {
        const id = await seq.next();
        expect(id).toBeGreaterThan(last);
        last = id;
      }
    }
    expect(seq.stats().windows).toBeGreaterThanOrEqual(16);
    await seq.close();
  });
});

describe('metrics', () => {
  it('collectMetrics exports a Redis sequence, every series at zero from the start', async () => {
    const tag = 'metrics';
    await addTag(dbs.postgres!.knex, { tag, step: 100 });
    const registry = new Registry();
    const seq = createRedisSequence({ redis: await nodeRedis(), knex: dbs.postgres!.knex, tag });
    const stop = collectMetrics(registry, seq);
    expect(await registry.metrics()).toContain('idlease_redis_ids_served_total{tag="metrics"} 0');
    await seq.nextBatch(30);
    const text = await registry.metrics();
    expect(text).toContain('idlease_redis_ids_served_total{tag="metrics"} 30');
    expect(text).toContain('idlease_redis_windows_total{tag="metrics"} 1');
    expect(text).toContain('idlease_redis_left_ids{tag="metrics"} 70');
    stop();
    await seq.close();
  });
});

describe('idlease serve --redis-url', () => {
  it('two servers on one tag hand out one increasing order; metrics count it', async () => {
    const tag = 'served';
    await addTag(dbs.postgres!.knex, { tag, step: 100 });
    const args = ['--redis-url', `redis://127.0.0.1:${server.port}`, '--tags', tag];
    const [a, b] = [await startServe(dbs.postgres!.url, args), await startServe(dbs.postgres!.url, args)];
    cleanup.push(
      () => a.stop(),
      () => b.stop(),
    );
    const seen: bigint[] = [];
    for (let i = 0; i < 20; i++) {
      const via = i % 2 ? b : a;
      if (i % 4 === 3)
        seen.push(...((await (await fetch(`${via.url}/v1/redis/${tag}/ids?n=3`)).json()) as { ids: string[] }).ids.map(BigInt));
      else seen.push(BigInt(await (await fetch(`${via.url}/api/redis/get/${tag}`)).text()));
    }
    for (let k = 1; k < seen.length; k++) expect(seen[k]! > seen[k - 1]!, `${seen[k]} after ${seen[k - 1]}`).toBe(true);
    const metrics = await (await fetch(`${a.url}/metrics`)).text();
    expect(metrics).toMatch(/idlease_redis_ids_served_total\{tag="served"\} \d+/);
    const none = await startServe(dbs.postgres!.url, ['--tags', tag]);
    cleanup.push(() => none.stop());
    const r = await fetch(`${none.url}/api/redis/get/${tag}`);
    expect(r.status).toBe(404);
    expect(await r.text()).toContain('--redis-url');
  });
});

describe('idlease redis status', () => {
  it('live while this Redis installed the window, stale after a restart from its RDB file', async () => {
    const rdb = await startRedis('rdb');
    cleanup.push(() => rdb.destroy());
    const tag = 'cli-status';
    await addTag(dbs.postgres!.knex, { tag, step: 100 });
    const redis = await nodeRedis(rdb.port);
    const seq = createRedisSequence({ redis, knex: dbs.postgres!.knex, tag, minStep: 100, maxStep: 100 });
    await seq.nextBatch(7);
    await seq.close();
    const status = async () => {
      const r = await runCli(['--json', 'redis', 'status', tag, '--redis-url', `redis://127.0.0.1:${rdb.port}`]);
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { state: string; current: { start: string; end: string; issued: number }; high: string };
    };
    expect(await status()).toMatchObject({ state: 'live', current: { start: '1', end: '100', issued: 7 }, high: '100' });
    await rdb.command('SAVE');
    await rdb.kill();
    await rdb.start();
    expect((await status()).state).toBe('stale');
  });

  it('a Redis that does not answer: one REDIS_UNAVAILABLE line, exit 1', async () => {
    const r = await runCli(['redis', 'status', 'x', '--redis-url', 'redis://127.0.0.1:1']);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^idlease: REDIS_UNAVAILABLE: Redis at redis:\/\/127\.0\.0\.1:1 did not answer/);
  });
});

describe('the Redis URL of the CLI', () => {
  const noEnv = { IDLEASE_REDIS_URL: '', REDIS_URL: '' };
  const statusOf = (args: string[], env: NodeJS.ProcessEnv) =>
    runCli(['--json', 'redis', 'status', 'cli-url', ...args], { env: { ...noEnv, ...env } });

  it('--redis-url, then --redis-url-file, then $IDLEASE_REDIS_URL, then $REDIS_URL (the db it names included)', async () => {
    await addTag(dbs.postgres!.knex, { tag: 'cli-url', step: 100 });
    const inDb9 = `redis://127.0.0.1:${server.port}/9`;
    const drawn = await runCli(['--url', dbs.postgres!.url, 'redis', 'next', 'cli-url', '-n', '2'], {
      env: { ...noEnv, REDIS_URL: inDb9 },
    });
    expect(drawn.code, drawn.stderr).toBe(0);
    expect(await server.command('EXISTS', 'idlease:seq:{cli-url}')).toBe(0);
    const c = await nodeRedis();
    await c.sendCommand(['SELECT', '9']);
    expect(await c.sendCommand(['EXISTS', 'idlease:seq:{cli-url}'])).toBe(1);
    const dead = 'redis://127.0.0.1:1';
    const live = async (r: Awaited<ReturnType<typeof runCli>>) => {
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ state: 'live', current: { issued: 2 } });
    };
    await live(await statusOf([], { REDIS_URL: inDb9 }));
    await live(await statusOf([], { IDLEASE_REDIS_URL: inDb9, REDIS_URL: dead }));
    await live(await statusOf(['--redis-url', inDb9], { IDLEASE_REDIS_URL: dead, REDIS_URL: dead }));
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'idlease-redis-url-')), 'url');
    writeFileSync(file, `${inDb9}\n`, { mode: 0o600 });
    await live(await statusOf(['--redis-url-file', file], { IDLEASE_REDIS_URL: dead, REDIS_URL: dead }));
    expect((await statusOf(['--redis-url-file', file, '--redis-url', inDb9], {})).code).toBe(2);
  });

  it('a password the server refuses is BAD_CONFIG (exit 2), not REDIS_UNAVAILABLE, and is not echoed; --help offers the file and the variable', async () => {
    const locked = await startRedis('none');
    cleanup.push(() => locked.destroy());
    await locked.command('CONFIG', 'SET', 'requirepass', 'right-pw');
    for (const url of [`redis://:wrong-pw@127.0.0.1:${locked.port}`, `redis://127.0.0.1:${locked.port}`]) {
      const r = await statusOf(['--redis-url', url], {});
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/^idlease: BAD_CONFIG: Redis at redis:\/\/.*refused the credentials/);
      expect(r.stderr).not.toContain('wrong-pw');
    }
    await live(await statusOf(['--redis-url', `redis://:right-pw@127.0.0.1:${locked.port}`], {}));
    for (const cmd of [['redis', 'next'], ['redis', 'status'], ['serve']]) {
      const help = await runCli([...cmd, '--help']);
      expect(help.stdout).toMatch(/--redis-url-file <file>/);
      expect(help.stdout).toMatch(/process list/);
      expect(help.stdout).toMatch(/IDLEASE_REDIS_URL/);
      expect(help.stdout).toMatch(/redis\+cluster:\/\//);
    }
    async function live(r: Awaited<ReturnType<typeof runCli>>) {
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ state: 'missing' });
    }
  });
});

/**
 * The Redis Lua snowflake as published (Redis TIME in ms, a shard id, a per-millisecond counter
 * with a short expiry): IDs repeat as soon as two Redis servers answer for one shard at once —
 * after a failover the old primary, still reachable, keeps answering — and whenever a server's
 * clock steps back. idlease does not build it (README: use the snowflake allocator, whose worker
 * ids are leased in the database, or this Redis sequence).
 */
const CLASSIC_SNOWFLAKE = `
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = 'sf:' .. ARGV[1] .. ':' .. ms
local seq = redis.call('INCR', key)
redis.call('PEXPIRE', key, 5)
return {tostring(ms), tostring(seq)}
`;

describe('the classic Redis Lua snowflake (not built)', () => {
  it('repeats IDs when the old primary and the promoted replica both answer for shard 1', async () => {
    const other = await startRedis('none');
    cleanup.push(() => other.destroy());
    const [a, b] = [await nodeRedis(), await nodeRedis(other.port)];
    const ids = new Map<string, number>();
    const until = Date.now() + 300;
    let repeats = 0;
    while (Date.now() < until) {
      const replies = await Promise.all([a, b, a, b].map((c) => c.sendCommand(['EVAL', CLASSIC_SNOWFLAKE, '0', '1']) as Promise<string[]>));
      for (const [ms, seq] of replies) {
        const id = `${ms}/${seq}`;
        if (ids.has(id)) repeats++;
        ids.set(id, 1);
      }
    }
    expect(repeats).toBeGreaterThan(0);
  });

  it("repeats IDs when the Redis server's clock steps back (one server, one shard)", async () => {
    const clock = clockStep();
    // hz 100: expired per-millisecond keys are removed within tens of ms, as on a busy server.
    const stepped = await startRedis('none', ['--hz', '100'], clock.env);
    cleanup.push(() => stepped.destroy());
    const c = await nodeRedis(stepped.port);
    const seen = new Set<string>();
    let repeats = 0;
    const draw = async (ms: number) => {
      for (const until = Date.now() + ms; Date.now() < until;) {
        const [t, seq] = (await c.sendCommand(['EVAL', CLASSIC_SNOWFLAKE, '0', '1'])) as string[];
        const id = `${t}/${seq}`;
        if (seen.has(id)) repeats++;
        seen.add(id);
      }
    };
    // The library really moves this server's clock: TIME follows the step.
    const before = Number(((await c.sendCommand(['TIME'])) as string[])[0]);
    clock.set(-3_600_000);
    expect(before - Number(((await c.sendCommand(['TIME'])) as string[])[0])).toBeGreaterThanOrEqual(3_599);
    clock.set(0);
    await draw(1_000);
    expect(repeats).toBe(0);
    // An NTP step back of 700 ms: milliseconds used 200–700 ms ago come round again, their
    // per-millisecond keys long expired, and the same (ms, seq) pairs are issued a second time.
    clock.set(-700);
    await draw(500);
    expect(repeats).toBeGreaterThan(0);
  });
});

/** A TCP proxy that can drop one reply from the server and cut the connection, as a network fault after the server ran the call. */
async function cuttingProxy(target: number) {
  let drop = false;
  let scripts = 0;
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target, '127.0.0.1');
    open.add(client).add(upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.on('data', (d: Buffer) => {
      scripts += d.toString('latin1').match(/EVALSHA|\bEVAL\b/gi)?.length ?? 0;
      upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => {
      if (drop) {
        drop = false;
        end();
        return;
      }
      client.write(d);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as net.AddressInfo).port,
    dropNextReply: () => {
      drop = true;
    },
    scriptCalls: () => scripts,
    close: () =>
      new Promise<void>((r) => {
        for (const s of open) s.destroy();
        server.close(() => r());
      }),
  };
}
