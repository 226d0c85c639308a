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
 * Then the cluster table: 8 tags drawn by 4 client processes (2 node-redis, 2 ioredis; 8 loops
 * each, one per tag) from one redis-server and from a 3-master Redis Cluster, alternated in the
 * same run: IDs/s and each server's CPU (INFO CPU, user + sys, per second of run). Its windows'
 * rows are on a PostgreSQL server (IDLEASE_BENCH_PG, default the local postgres; a database made
 * and dropped here), since 4 processes share them.
 *
 *   npx tsx bench/run.ts redis
 */
import { createClient } from 'redis';
import { connect } from '../src/connect.js';
import { migrate } from '../src/migrations/migrate.js';
import { addTag } from '../src/segment/admin.js';
import { createRedisSequence } from '../src/redis-sequence/index.js';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { startRedis, type RedisServer } from '../test/helpers/redis.js';
import { startRedisCluster } from '../test/helpers/redis-cluster.js';
import { REPO_ROOT, TSX_LOADER } from '../test/helpers/cli.js';

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
  await clusterTable();
}

const CLUSTER_TAGS = Array.from({ length: 8 }, (_, i) => `k${i}`);
const CLUSTER_MS = 6_000;

/** CPU seconds (user + sys) process `pid` has used so far (/proc/<pid>/stat, 100 ticks a second); 0 when gone. */
function procCpu(pid: number | undefined): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/** CPU seconds (user + sys) the server has used so far. */
async function cpuOf(s: RedisServer): Promise<number> {
  // Retried: on a machine this loaded a short-lived connection can take seconds.
  const info = await (async () => {
    for (let i = 0; ; i++) {
      try {
        return String(await s.command('INFO', 'CPU'));
      } catch (err) {
        if (i === 4) throw err;
      }
    }
  })();
  return Number(/used_cpu_user:([\d.]+)/.exec(info)![1]) + Number(/used_cpu_sys:([\d.]+)/.exec(info)![1]);
}

/** 4 client processes drawing the 8 tags for CLUSTER_MS: IDs/s and each server's CPU, cores. */
async function drawFrom(servers: RedisServer[], single: boolean, dbUrl: string): Promise<{ ids: number; cpu: number[]; clients: number }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-bench-cluster-'));
  const stopFile = path.join(dir, 'stop');
  try {
    const children = [0, 1, 2, 3].map((i) => {
      const cfg = {
        dbUrl,
        ports: servers.map((n) => n.port),
        tags: CLUSTER_TAGS,
        client: i % 2 ? 'ioredis' : 'node-redis',
        single,
        out: path.join(dir, `w${i}`),
        stopFile,
        waitTimeoutMs: 5_000,
        commandTimeoutMs: 1_000,
      };
      const child = spawn(
        process.execPath,
        ['--import', TSX_LOADER, path.join(REPO_ROOT, 'test/redis/redis-cluster-worker.ts'), JSON.stringify(cfg)],
        {
          cwd: REPO_ROOT,
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      return new Promise<{ pid: number | undefined; progress: () => number; warm: () => number; done: Promise<void>; kill: () => void }>(
        (resolve) => {
          const progress = () => {
            const lines = out.match(/progress (\{.*\})\n/g);
            if (!lines) return 0;
            return Object.values(JSON.parse(lines[lines.length - 1]!.slice(9)) as Record<string, number>).reduce((a, b) => a + b, 0);
          };
          let exited = false;
          const done = new Promise<void>((r) =>
            child.once('exit', () => {
              exited = true;
              r();
            }),
          );
          const progressOrExit = () => {
            if (exited) throw new Error(`a client process exited before the run: ${out.slice(-500)}`);
            return progress();
          };
          resolve({ pid: child.pid, progress, warm: progressOrExit, done, kill: () => child.kill('SIGKILL') });
        },
      );
    });
    const ws = await Promise.all(children);
    // Warm-up: every process drawing (clients connected, first windows leased), then the timed span.
    try {
      while (ws.some((w) => w.warm() < 1000)) await new Promise((r) => setTimeout(r, 50));
    } catch (err) {
      for (const w of ws) w.kill();
      throw err;
    }
    const ids0 = ws.reduce((a, w) => a + w.progress(), 0);
    const c0 = await Promise.all(servers.map(cpuOf));
    const p0 = ws.reduce((a, w) => a + procCpu(w.pid), 0);
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, CLUSTER_MS));
    const ids1 = ws.reduce((a, w) => a + w.progress(), 0);
    const c1 = await Promise.all(servers.map(cpuOf));
    const p1 = ws.reduce((a, w) => a + procCpu(w.pid), 0);
    const secs = (performance.now() - t0) / 1000;
    writeFileSync(stopFile, '');
    await Promise.all(ws.map((w) => w.done));
    return { ids: (ids1 - ids0) / secs, cpu: c1.map((c, i) => (c - c0[i]!) / secs), clients: (p1 - p0) / secs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function clusterTable(): Promise<void> {
  const admin = connect(process.env.IDLEASE_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  const name = `idl_bench_cluster_${randomBytes(4).toString('hex')}`;
  await admin.raw(`CREATE DATABASE ${name}`);
  const u = new URL(process.env.IDLEASE_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  u.pathname = `/${name}`;
  const dbUrl = u.toString();
  const knex = connect(dbUrl);
  const one = await startRedis('none');
  const cluster = await startRedisCluster(3, 0);
  try {
    await migrate(knex);
    for (const tag of CLUSTER_TAGS) await addTag(knex, { tag, step: 1000 });
    const masters = (await cluster.roles()).map((r) => r.master);
    const perMaster = await Promise.all(
      masters.map(async (m) => {
        let n = 0;
        for (const t of CLUSTER_TAGS) if ((await cluster.masterOf(await cluster.keySlot(`idlease:seq:{${t}}`))) === m) n++;
        return n;
      }),
    );
    type Side = Awaited<ReturnType<typeof drawFrom>>;
    const rows: Array<{ single: Side; cluster: Side }> = [];
    for (let round = 0; round < 3; round++) {
      const single = await drawFrom([one], true, dbUrl);
      const multi = await drawFrom(masters, false, dbUrl);
      rows.push({ single, cluster: multi });
    }
    const cores = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(' + ');
    console.log(
      `\nRedis Cluster: 8 tags, 4 client processes (2 node-redis createCluster, 2 ioredis Cluster; 8 loops each, one per tag), ${CLUSTER_MS / 1000} s per side, sides alternated, 3 rounds; ` +
        `tags per master ${perMaster.join('/')}; CPU in cores (INFO CPU, user + sys). This machine: ${(await import('node:os')).cpus().length} cores shared by the clients, the servers and the database.`,
    );
    console.log(
      '| round | one Redis IDs/s | its CPU | 3-master cluster IDs/s | CPU per master | cluster / one |\n|---|---|---|---|---|---|',
    );
    rows.forEach((r, i) =>
      console.log(
        `| ${i + 1} | ${fmt(r.single.ids)} | ${cores(r.single.cpu)} | ${fmt(r.cluster.ids)} | ${cores(r.cluster.cpu)} (max ${Math.max(...r.cluster.cpu).toFixed(2)}) | ${(r.cluster.ids / r.single.ids).toFixed(2)}× |`,
      ),
    );
  } finally {
    await knex.destroy();
    await one.destroy();
    await cluster.destroy();
    await admin.raw(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.destroy();
  }
}
