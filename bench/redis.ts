/**
 * Redis sequence benchmark: ratios against bare calls measured in the same run, on the same
 * node-redis client and the same private redis-server (started here, never the shared 6379):
 * raw INCR, and a bare bounded Lua call (EVALSHA of a script that issues inside a window, with no
 * identity check and no database) — what `next()` must stay within 0.8× of. Then nextBatch(1000)
 * and 64 callers in flight. Then database leases per second of one process issuing 10k and 100k
 * IDs/s, and flat out, each from a row step of 1000 (the windows must follow the rate). Rounds are interleaved, short, and many: on a loaded machine a ratio is
 * taken within each round (the two measures a second apart) and the median of the rounds' ratios is
 * reported with their range. The windows' row:
 * embedded PGlite (in memory) by default; IDLEASE_BENCH_URL for a server.
 *
 *   npx tsx bench/run.ts redis
 */
import { createClient } from 'redis';
import { connect } from '../src/connect.js';
import { migrate } from '../src/migrations/migrate.js';
import { addTag } from '../src/segment/admin.js';
import { createRedisSequence } from '../src/redis-sequence/index.js';
import { startRedis } from '../test/helpers/redis.js';

const SEQUENTIAL = 2_000;
const IN_FLIGHT = 64;
const ROUNDS = 7;

/** The bounded-window issue without what makes it safe: the baseline a Lua sequence cannot beat. */
const BARE = `
local h = redis.call('HMGET', KEYS[1], 'base', 'size', 'off')
local size, off = tonumber(h[2]), tonumber(h[3])
if off >= size then return {'empty'} end
redis.call('HSET', KEYS[1], 'off', tostring(off + 1))
return {h[1], tostring(off)}
`;

function fmt(n: number): string {
  return n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : n.toFixed(0);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * Two kinds of call alternated one by one, each timed: on a loaded machine both see the same
 * load, so their ratio holds where rates measured a second apart do not. Calls per second of each.
 */
async function paired(a: () => Promise<unknown>, b: () => Promise<unknown>, count: number): Promise<[number, number]> {
  let ta = 0;
  let tb = 0;
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    await a();
    const t1 = performance.now();
    await b();
    tb += performance.now() - t1;
    ta += t1 - t0;
  }
  return [(count / ta) * 1000, (count / tb) * 1000];
}

/** Calls per second of `call`, `count` times by `callers` concurrent loops. */
async function rate(call: () => Promise<unknown>, count: number, callers = 1): Promise<number> {
  let left = count;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (left-- > 0) await call();
    }),
  );
  return (count / (performance.now() - t0)) * 1000;
}

/**
 * Database leases per second of one sequence issuing `idsPerSecond` (paced every 10 ms, undefined:
 * flat out, one batch caller and 32 next() callers) for `ms`, from a row step of 1000: over the
 * whole run (the ramp included) and over its second half.
 */
async function leaseRate(
  redis: Parameters<typeof createRedisSequence>[0]['redis'],
  knex: Parameters<typeof createRedisSequence>[0]['knex'],
  idsPerSecond: number | undefined,
  ms: number,
): Promise<{ all: number; late: number; ids: number; window: number }> {
  const tag = `lease-${idsPerSecond ?? 'max'}-${Date.now()}`;
  await addTag(knex!, { tag, step: 1000 });
  const t0 = performance.now();
  const windowsAt: number[] = [];
  const seq = createRedisSequence({ redis, knex, tag, onEvent: (e) => e.type === 'window' && windowsAt.push(performance.now() - t0) });
  const until = t0 + ms;
  if (idsPerSecond === undefined) {
    await Promise.all([
      (async () => {
        while (performance.now() < until) await seq.nextBatch(1000);
      })(),
      ...Array.from({ length: 32 }, async () => {
        while (performance.now() < until) await seq.next();
      }),
    ]);
  } else {
    const perTick = idsPerSecond / 100;
    for (let tick = 1; performance.now() < until; tick++) {
      await seq.nextBatch(perTick);
      const wait = t0 + tick * 10 - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
  }
  const s = seq.stats();
  await seq.close();
  const late = windowsAt.filter((t) => t >= ms / 2).length;
  return {
    all: (windowsAt.length / ms) * 1000,
    late: (late / ms) * 2000,
    ids: (s.served / (performance.now() - t0)) * 1000,
    window: s.windowSize,
  };
}

export default async function bench(): Promise<void> {
  const server = await startRedis('none');
  const redis = createClient({ socket: { port: server.port, host: '127.0.0.1' } });
  await redis.connect();
  const knex = connect(process.env.IDLEASE_BENCH_URL ?? 'pglite:memory');
  try {
    await migrate(knex);
    await addTag(knex, { tag: 'bench', step: 100_000 });
    const seq = createRedisSequence({ redis, knex, tag: 'bench', minStep: 100_000 });
    const bareSha = String(await redis.sendCommand(['SCRIPT', 'LOAD', BARE]));
    const refill = () => redis.sendCommand(['HSET', 'bare', 'base', '1000000000000', 'size', '1000000000', 'off', '0']);
    await refill();
    const results: Record<string, number[]> = {};
    const add = (name: string, v: number) => (results[name] ??= []).push(v);
    await seq.nextBatch(1000); // first window, script cached
    for (let round = 0; round < ROUNDS; round++) {
      const bare = () => redis.sendCommand(['EVALSHA', bareSha, '1', 'bare']);
      const [incr, bareVsIncr] = await paired(() => redis.sendCommand(['INCR', 'counter']), bare, SEQUENTIAL);
      const [bareVsNext, next] = await paired(bare, () => seq.next(), SEQUENTIAL);
      add('INCR', incr);
      add('bare Lua', bareVsIncr);
      add('bare Lua ', bareVsNext);
      add('next()', next);
      add('nextBatch(1000) IDs', 1000 * (await rate(() => seq.nextBatch(1000), 200)));
      add(
        `bare Lua, ${IN_FLIGHT} in flight`,
        await rate(() => redis.sendCommand(['EVALSHA', bareSha, '1', 'bare']), 8 * SEQUENTIAL, IN_FLIGHT),
      );
      add(`next(), ${IN_FLIGHT} in flight`, await rate(() => seq.next(), 8 * SEQUENTIAL, IN_FLIGHT));
    }
    const m = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, median(v)]));
    const row = (name: string, base?: string) => {
      const ratios = base ? results[name]!.map((v, i) => v / results[base]![i]!) : [];
      const ratio = base
        ? `${median(ratios).toFixed(2)}× ${base} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`
        : '';
      console.log(`| ${name} | ${fmt(m[name]!)}/s | ${ratio} |`);
    };
    console.log(
      `median of ${ROUNDS} interleaved rounds (ratio: median of the rounds' ratios, and their range; sequential pairs alternate call by call); node-redis, one connection, private redis-server ${String(await redis.sendCommand(['INFO', 'server'])).match(/redis_version:(\S+)/)?.[1]}`,
    );
    console.log('| call | rate | ratio |\n|---|---|---|');
    row('INCR');
    row('bare Lua', 'INCR');
    row('next()', 'bare Lua ');
    row('nextBatch(1000) IDs', 'next()');
    row(`bare Lua, ${IN_FLIGHT} in flight`);
    row(`next(), ${IN_FLIGHT} in flight`, `bare Lua, ${IN_FLIGHT} in flight`);
    const s = seq.stats();
    console.log(`\nsequence: ${s.served} IDs, ${s.calls} calls, ${s.windows} windows of up to ${s.windowSize}`);
    await seq.close();
    console.log('\ndatabase leases per second, one process, row step 1000, 6 s each (targetLeaseMs 10,000 ms):');
    console.log('| issuing | IDs/s reached | leases/s, whole run | leases/s, second half | last window |\n|---|---|---|---|---|');
    for (const target of [10_000, 100_000, undefined]) {
      const r = await leaseRate(redis, knex, target, 6_000);
      console.log(
        `| ${target === undefined ? 'flat out' : `${fmt(target)} IDs/s`} | ${fmt(r.ids)} | ${r.all.toFixed(2)} | ${r.late.toFixed(2)} | ${fmt(r.window)} |`,
      );
    }
  } finally {
    redis.destroy();
    await knex.destroy();
    await server.destroy();
  }
}
