/**
 * One "process" of the Redis Cluster test and bench (bench/redis.ts): a cluster client (node-redis createCluster() or ioredis
 * Cluster) and one Redis sequence per tag, each drawn by a loop of its own until the stop file
 * appears. Every ID goes to `<out>-<tag>.bin` (int64 little endian); every failed call is recorded
 * with its code and duration, every pause in a tag's draws longer than 100 ms as a stall (from the
 * last answer before it to the first after it). Prints `progress {"<tag>": n, …}` every 100 ms and a
 * JSON summary line at the end.
 *
 *   node --import tsx test/redis/redis-cluster-worker.ts '<json config>'
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { createClient, createCluster } from 'redis';
import { Cluster, Redis } from 'ioredis';
import { connect } from '../../src/connect.js';
import { createRedisSequence } from '../../src/redis-sequence/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { stopRequested } from '../helpers/stop-file.js';

interface WorkerConfig {
  dbUrl: string;
  ports: number[];
  tags: string[];
  client: 'node-redis' | 'ioredis';
  /** One plain client of ports[0] instead of a cluster client (the bench's single-Redis side). */
  single?: boolean;
  out: string;
  stopFile: string;
  waitTimeoutMs: number;
  commandTimeoutMs: number;
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
// The parent may stop reading (a bench that gave up): not this process's failure.
process.stdout.on('error', () => undefined);
const knex = connect(cfg.dbUrl, { poolMax: 4 });
let redis: unknown;
let quit: () => Promise<unknown>;
if (cfg.single && cfg.client === 'ioredis') {
  const c = new Redis({ host: '127.0.0.1', port: cfg.ports[0]!, maxRetriesPerRequest: 2 });
  c.on('error', () => undefined);
  redis = c;
  quit = async () => c.disconnect();
} else if (cfg.single) {
  const c = createClient({ socket: { host: '127.0.0.1', port: cfg.ports[0]!, reconnectStrategy: () => 50, connectTimeout: 5_000 } });
  c.on('error', () => undefined);
  await c.connect();
  redis = c;
  quit = async () => c.destroy();
} else if (cfg.client === 'ioredis') {
  const c = new Cluster(
    cfg.ports.map((port) => ({ host: '127.0.0.1', port })),
    {
      clusterRetryStrategy: () => 50,
      retryDelayOnFailover: 50,
      retryDelayOnClusterDown: 50,
      retryDelayOnTryAgain: 50,
      slotsRefreshTimeout: 500,
      redisOptions: { maxRetriesPerRequest: 2, connectTimeout: 2_000 },
    },
  );
  c.on('error', () => undefined);
  c.on('node error', () => undefined);
  redis = c;
  quit = async () => c.disconnect();
} else {
  const c = createCluster({
    rootNodes: cfg.ports.map((port) => ({ socket: { host: '127.0.0.1', port } })),
    // A refused connection (a killed node) fails at once; the timeout is for a loaded machine.
    defaults: { socket: { reconnectStrategy: () => 50, connectTimeout: 2_000 } },
  });
  c.on('error', () => undefined);
  c.on('node-error', () => undefined);
  await c.connect();
  redis = c;
  quit = async () => c.destroy();
}

interface Stall {
  tag: string;
  from: number;
  to: number;
}
const counts: Record<string, number> = {};
const errors: Record<string, number> = {};
const failures: Array<{ tag: string; code: string; ms: number; at: number }> = [];
const stalls: Stall[] = [];
let maxCallMs = 0;
let reseeds = 0;

async function drawTag(tag: string): Promise<void> {
  const seq = createRedisSequence({
    redis,
    knex,
    tag,
    minStep: 50,
    maxStep: 5000,
    targetLeaseMs: 2000,
    waitTimeoutMs: cfg.waitTimeoutMs,
    commandTimeoutMs: cfg.commandTimeoutMs,
    claimTimeoutMs: 1000,
    retryMinMs: 10,
    retryMaxMs: 200,
  });
  const fd = openSync(`${cfg.out}-${tag}.bin`, 'w');
  const buf = new BigInt64Array(64);
  let n = 0;
  const put = (id: bigint) => {
    buf[n++] = id;
    counts[tag] = (counts[tag] ?? 0) + 1;
    if (n === buf.length) {
      writeSync(fd, new Uint8Array(buf.buffer, 0, n * 8));
      n = 0;
    }
  };
  let lastOk = Date.now();
  for (let round = 0; !(round % 16 === 0 && stopRequested(cfg.stopFile)); round++) {
    const t0 = performance.now();
    try {
      if (round % 8 === 0) for (const id of await seq.nextBatch(1 + (round % 23))) put(id);
      else put(await seq.next());
      const now = Date.now();
      if (now - lastOk > 100) stalls.push({ tag, from: lastOk, to: now });
      lastOk = now;
    } catch (err) {
      const code = isIdleaseError(err) ? err.code : `untyped ${String(err)}`;
      errors[code] = (errors[code] ?? 0) + 1;
      failures.push({ tag, code, ms: Math.round(performance.now() - t0), at: Date.now() });
      if (process.env.IDLEASE_WORKER_ERRORS) process.stderr.write(`${tag} ${code}: ${String((err as Error).message)}\n`);
    } finally {
      maxCallMs = Math.max(maxCallMs, performance.now() - t0);
    }
    // A macrotask now and then: the progress timer and the other tags' loops get their turn.
    if (round % 64 === 0) await new Promise((r) => setImmediate(r));
  }
  writeSync(fd, new Uint8Array(buf.buffer, 0, n * 8));
  closeSync(fd);
  reseeds += seq.stats().reseeds;
  await seq.close();
}

const timer = setInterval(() => process.stdout.write(`progress ${JSON.stringify(counts)}\n`), 100);
await Promise.all(cfg.tags.map((t) => drawTag(t)));
clearInterval(timer);
await quit();
await knex.destroy();
process.stdout.write(`summary ${JSON.stringify({ counts, errors, failures, stalls, reseeds, maxCallMs: Math.round(maxCallMs) })}\n`);
