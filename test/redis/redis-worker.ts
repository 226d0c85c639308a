/**
 * One "process" of the Redis sequence tests: takes IDs for a tag from a Redis sequence and appends
 * them (int64, little endian) to a file, flushing every 256 IDs so that a SIGKILL loses at most
 * the unflushed tail. Errors while Redis or the database is away are counted and the loop goes
 * on. Prints `progress <n>` after each flush and a JSON summary line at the end.
 *
 *   node --import tsx test/redis/redis-worker.ts '<json config>'
 */
import { idFile } from '../helpers/id-file.js';
import { createClient, createSentinel } from 'redis';
import { Redis } from 'ioredis';
import { connect } from '../../src/connect.js';
import { createRedisSequence } from '../../src/redis-sequence/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { stopRequested } from '../helpers/stop-file.js';

interface WorkerConfig {
  dbUrl: string;
  redisPort: number;
  /** Default 127.0.0.1; a partition test's server address. */
  redisHost?: string;
  tag: string;
  count: number;
  out: string;
  client?: 'node-redis' | 'ioredis';
  /** Sentinel ports: the client is Sentinel-aware (ioredis { sentinels, name }, node-redis createSentinel()) and follows the master they name. */
  sentinels?: number[];
  /** The master's name at the sentinels. Default idl. */
  masterName?: string;
  minStep?: number;
  maxStep?: number;
  /** Stop early when this file appears (HA tests that run until told). */
  stopFile?: string;
  /** A pause after every call, ms: a service's pace instead of flat out. */
  pauseMs?: number;
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
const knex = connect(cfg.dbUrl, { poolMax: 2 });
let redis: unknown;
let quit: () => Promise<unknown>;
const host = cfg.redisHost ?? '127.0.0.1';
if (cfg.sentinels && cfg.client === 'ioredis') {
  const io = new Redis({
    sentinels: cfg.sentinels.map((port) => ({ host, port })),
    name: cfg.masterName ?? 'idl',
    retryStrategy: () => 20,
    sentinelRetryStrategy: () => 20,
    maxRetriesPerRequest: null,
  });
  io.on('error', () => undefined);
  redis = io;
  quit = async () => io.disconnect();
} else if (cfg.sentinels) {
  const s = createSentinel({
    name: cfg.masterName ?? 'idl',
    sentinelRootNodes: cfg.sentinels.map((port) => ({ host, port })),
    nodeClientOptions: { socket: { reconnectStrategy: () => 20, connectTimeout: 1000 } },
  });
  s.on('error', () => undefined);
  await s.connect();
  redis = s;
  quit = async () => s.destroy();
} else if (cfg.client === 'ioredis') {
  const io = new Redis({
    port: cfg.redisPort,
    host: cfg.redisHost ?? '127.0.0.1',
    retryStrategy: () => 20,
    maxRetriesPerRequest: null,
    lazyConnect: false,
  });
  io.on('error', () => undefined);
  redis = io;
  quit = async () => io.disconnect();
} else {
  const nr = createClient({
    socket: { port: cfg.redisPort, host: cfg.redisHost ?? '127.0.0.1', reconnectStrategy: () => 20, connectTimeout: 1000 },
  });
  nr.on('error', () => undefined);
  await nr.connect();
  redis = nr;
  quit = async () => nr.destroy();
}
const seq = createRedisSequence({
  redis,
  knex,
  tag: cfg.tag,
  minStep: cfg.minStep ?? 50,
  maxStep: cfg.maxStep ?? 5000,
  targetLeaseMs: 2000,
  waitTimeoutMs: 2000,
  commandTimeoutMs: 500,
  claimTimeoutMs: 1000,
  retryMinMs: 10,
  retryMaxMs: 200,
});
const ids = idFile(cfg.out, 256);
const errors: Record<string, number> = {};
// The longest call, from its start to its answer or its error: every call must settle within its bound.
let maxCallMs = 0;
for (let round = 0; ids.count < cfg.count && !(round % 64 === 0 && cfg.stopFile && stopRequested(cfg.stopFile)); round++) {
  const t0 = performance.now();
  try {
    if (round % 8 === 0) {
      for (const id of await seq.nextBatch(Math.min(1 + (round % 37), cfg.count - ids.count))) ids.put(id);
    } else {
      ids.put(await seq.next());
    }
  } catch (err) {
    const code = isIdleaseError(err) ? err.code : String(err);
    if (code !== 'REDIS_UNAVAILABLE' && code !== 'DB_UNAVAILABLE') {
      process.stderr.write(`fatal ${code}: ${String((err as Error).message)}\n`);
      process.exit(3);
    }
    errors[code] = (errors[code] ?? 0) + 1;
    if (process.env.IDLEASE_WORKER_ERRORS) process.stderr.write(`${code}: ${String((err as Error).message)}\n`);
  } finally {
    maxCallMs = Math.max(maxCallMs, performance.now() - t0);
  }
  if (cfg.pauseMs) await new Promise((r) => setTimeout(r, cfg.pauseMs));
}
ids.close();
const s = seq.stats();
await seq.close();
await quit();
await knex.destroy();
process.stdout.write(
  `summary ${JSON.stringify({ done: ids.count, errors, windows: s.windows, reseeds: s.reseeds, lostWindows: s.lostWindows, givenBack: String(s.givenBack), calls: s.calls, maxCallMs: Math.round(maxCallMs) })}\n`,
);
