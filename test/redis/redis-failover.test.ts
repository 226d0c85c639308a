/**
 * Redis lost under OS workers: every ID each worker got is recorded and counted. Redis is killed
 * with no persistence, restored from an RDB snapshot taken earlier, restarted from an AOF cut back
 * to an earlier fsync, replaced by a lagging replica promoted behind a TCP switch (by hand and by
 * three sentinels), demoted and re-promoted, split in two, and moved to another Cluster node;
 * connections are cut mid-call; fleets re-seed at once after empty restarts and injected stale
 * keys. The windows' database side is PostgreSQL.
 *
 * The stale-snapshot cases are the ones a "re-seed when the key is missing" design fails: the
 * key comes back present, holding a counter below what was already issued. The last test shows
 * that failure on the classic script itself.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { startRedis, startSentinel, type Persistence, type RedisServer } from '../helpers/redis.js';
import { countIds, startRedisWorker, summaryOf, untilProgress, type RedisWorker, type WorkerSummary } from '../helpers/redis-workers.js';
import { startTcpSwitch, type TcpSwitch } from '../helpers/tcp-switch.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import { waitFor } from '../helpers/wait.js';

const PER_WORKER = 8_000;

let db: TestDb;
const dirs: string[] = [];
const servers: RedisServer[] = [];
const switches: TcpSwitch[] = [];

beforeAll(async () => {
  db = await createTestDb('postgres', 'redisfail');
  await migrate(db.knex);
});

afterAll(async () => {
  await Promise.all(switches.map((s) => s.close()));
  await Promise.all(servers.map((s) => s.destroy()));
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  await db?.drop();
});

async function redis(persistence: Persistence, extra: string[] = []): Promise<RedisServer> {
  const s = await startRedis(persistence, extra);
  servers.push(s);
  return s;
}

interface Outcome {
  total: number;
  duplicates: number;
  unordered: number;
  summaries: WorkerSummary[];
}

/**
 * `workers` processes (odd ones on ioredis, even ones on node-redis) taking `count` IDs each on a
 * new tag through `port`; `disrupt` runs while they do; then every ID is counted.
 */
async function run(
  tag: string,
  port: number | ((i: number) => number),
  workers: number,
  count: number,
  disrupt: (ws: RedisWorker[]) => Promise<void>,
  extra: (i: number) => Record<string, unknown> = () => ({}),
): Promise<Outcome> {
  await addTag(db.knex, { tag, step: 100 });
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-redis-ids-'));
  dirs.push(dir);
  const ws = Array.from({ length: workers }, (_, i) =>
    startRedisWorker(`${tag}-${i}`, dir, {
      dbUrl: db.url,
      redisPort: typeof port === 'number' ? port : port(i),
      tag,
      count,
      client: i % 2 ? 'ioredis' : 'node-redis',
      ...extra(i),
    }),
  );
  try {
    await disrupt(ws);
    const summaries = await Promise.all(ws.map(summaryOf));
    return { ...countIds(ws.map((w) => w.out)), summaries };
  } finally {
    for (const w of ws) if (w.child.exitCode === null) w.child.kill('SIGKILL');
  }
}

/** Redis 7's multi-part AOF: the file the writes go to. */
function incrementalAof(r: RedisServer): string {
  const dir = path.join(r.dir, 'appendonlydir');
  const f = readdirSync(dir).find((n) => n.endsWith('.incr.aof'));
  if (!f) throw new Error(`no incremental AOF in ${dir}`);
  return path.join(dir, f);
}

/**
 * A primary and a replica following it through a link the test can cut, and `fronts` switches
 * the workers reach Redis through (all on the primary at first). `cutLink(tag)` waits until the
 * replica holds the tag's key, then stops its replication: from then on it lags.
 */
async function replicatedPair(fronts = 1) {
  const primary = await redis('none');
  const replica = await redis('none');
  const link = await startTcpSwitch(primary.port);
  const switchesToPrimary: TcpSwitch[] = [];
  for (let i = 0; i < fronts; i++) switchesToPrimary.push(await startTcpSwitch(primary.port));
  switches.push(link, ...switchesToPrimary);
  await replica.command('REPLICAOF', '127.0.0.1', String(link.port));
  return {
    primary,
    replica,
    fronts: switchesToPrimary,
    async cutLink(tag: string) {
      await waitFor(async () => (await replica.command('EXISTS', `idlease:seq:{${tag}}`)) === 1, {
        timeoutMs: 15_000,
        what: "the replica to hold the tag's key",
      });
      link.pointTo(1); // nothing listens on port 1
    },
  };
}

const sum = (o: Outcome, f: (s: WorkerSummary) => number) => o.summaries.reduce((a, s) => a + f(s), 0);

function report(name: string, o: Outcome): void {
  console.log(
    `${name}: ${o.total} IDs, ${o.duplicates} duplicates, ${o.unordered} out of order; windows ${sum(o, (s) => s.windows)}, reseeds ${sum(o, (s) => s.reseeds)}, lost windows ${sum(o, (s) => s.lostWindows)}`,
  );
}

describe('Redis sequence under Redis loss (OS workers, half on node-redis and half on ioredis)', () => {
  it('SIGKILL with no persistence, empty restart: no duplicate, each worker strictly increasing', async () => {
    const r = await redis('none');
    const o = await run('nopersist', r.port, 4, PER_WORKER, async (ws) => {
      await untilProgress(ws, PER_WORKER * 0.4);
      await r.kill();
      await r.start();
    });
    report('no persistence', o);
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
    expect(sum(o, (s) => s.reseeds)).toBeGreaterThanOrEqual(1);
  });

  it('SIGKILL after SAVE: the restored key is present but stale, and is never issued from again', async () => {
    const r = await redis('rdb');
    const o = await run('stalerdb', r.port, 4, PER_WORKER, async (ws) => {
      await untilProgress(ws, PER_WORKER * 0.25);
      await r.command('SAVE');
      await untilProgress(ws, PER_WORKER * 0.5);
      await r.kill();
      await r.start();
      // The snapshot brought the key back, holding a window the workers went past.
      expect(await r.command('EXISTS', 'idlease:seq:{stalerdb}')).toBe(1);
    });
    report('stale RDB', o);
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
  });

  it('AOF everysec cut back to an earlier fsync (a host crash): the key is present but stale, and is never issued from again', async () => {
    // A SIGKILL alone loses nothing with everysec: the AOF is written to the page cache before each
    // reply. A host crash loses what was not fsynced; cutting the file back to an earlier length
    // models that (aof-load-truncated, on by default, loads a file cut mid-command).
    const r = await redis('aof-everysec');
    const o = await run('aofsec', r.port, 4, PER_WORKER, async (ws) => {
      await untilProgress(ws, PER_WORKER * 0.25);
      const aof = incrementalAof(r);
      const fsynced = statSync(aof).size;
      await untilProgress(ws, PER_WORKER * 0.5);
      await r.kill();
      truncateSync(aof, fsynced);
      await r.start();
      expect(await r.command('EXISTS', 'idlease:seq:{aofsec}')).toBe(1);
    });
    report('AOF everysec, cut back', o);
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
  });

  it('a lagging replica promoted (REPLICAOF NO ONE) behind a TCP switch', async () => {
    const {
      primary,
      replica,
      fronts: [front],
      cutLink,
    } = await replicatedPair();
    let lagged = '';
    const o = await run('promote', front!.port, 4, PER_WORKER, async (ws) => {
      await untilProgress(ws, PER_WORKER * 0.25);
      await cutLink('promote');
      await untilProgress(ws, PER_WORKER * 0.5);
      await primary.kill();
      await replica.command('REPLICAOF', 'NO', 'ONE');
      lagged = String(await replica.command('HGET', 'idlease:seq:{promote}', 'off'));
      front!.pointTo(replica.port);
    });
    report('promoted lagging replica', o);
    expect(lagged, 'the replica held the key').not.toBe('null');
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
  });

  it('a primary demoted and re-promoted comes back with a stale key of its own run_id: master_replid tells it apart', async () => {
    const {
      primary: a,
      replica: b,
      fronts: [front],
      cutLink,
    } = await replicatedPair();
    const o = await run('repromote', front!.port, 4, PER_WORKER, async (ws) => {
      await untilProgress(ws, PER_WORKER * 0.25);
      await cutLink('repromote'); // b stops receiving a's writes
      await untilProgress(ws, PER_WORKER * 0.5);
      front!.pointTo(1); // nobody reaches either server for a moment
      await b.command('REPLICAOF', 'NO', 'ONE');
      await a.command('REPLICAOF', '127.0.0.1', String(b.port)); // a takes b's (older) copy of a's own key
      await waitFor(async () => /master_link_status:up/.test(String(await a.command('INFO', 'replication'))), {
        timeoutMs: 15_000,
        what: "the replica's link to its primary to be up",
      });
      // The dangerous case: a's key, installed by a itself (same run_id), behind what a issued.
      const installedBy = String(await a.command('HGET', 'idlease:seq:{repromote}', 'inc'));
      expect(installedBy.split('/')[0]).toBe(/run_id:(\w+)/.exec(String(await a.command('INFO', 'server')))![1]);
      await a.command('REPLICAOF', 'NO', 'ONE');
      front!.pointTo(a.port);
    });
    report('demoted and re-promoted', o);
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
  });

  it('split brain: the old primary still reachable to half the workers after a promotion — no duplicate, order broken only there', async () => {
    const { replica: b, fronts, cutLink } = await replicatedPair(2);
    const o = await run(
      'splitbrain',
      (i) => fronts[i % 2]!.port,
      4,
      PER_WORKER,
      async (ws) => {
        await untilProgress(ws, PER_WORKER * 0.25);
        await cutLink('splitbrain');
        await b.command('REPLICAOF', 'NO', 'ONE');
        fronts[1]!.pointTo(b.port); // workers 1 and 3 move; 0 and 2 stay on the old primary
        await untilProgress(ws, PER_WORKER * 0.6);
        fronts[0]!.pointTo(b.port); // the old primary is fenced off at last
      },
    );
    report('split brain', o);
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
  });

  it('a Sentinel failover (three sentinels) behind a TCP switch that follows the master they name', async () => {
    const primary = await redis('none');
    const replica = await redis('none');
    await replica.command('REPLICAOF', '127.0.0.1', String(primary.port));
    await waitFor(async () => /master_link_status:up/.test(String(await replica.command('INFO', 'replication'))), {
      timeoutMs: 15_000,
      what: "the replica's link to its primary to be up",
    });
    const sentinels = await Promise.all([0, 1, 2].map(() => startSentinel(primary.port)));
    servers.push(...sentinels);
    const front = await startTcpSwitch(primary.port);
    switches.push(front);
    const o = await run('sentinel', front.port, 4, PER_WORKER, async (ws) => {
      await untilProgress(ws, PER_WORKER * 0.4);
      await primary.kill();
      await waitFor(
        async () => String(await sentinels[0]!.command('SENTINEL', 'get-master-addr-by-name', 'idl')).includes(String(replica.port)),
        { timeoutMs: 30_000, what: 'sentinel to name the replica as master' },
      );
      front.pointTo(replica.port);
    });
    report('Sentinel failover', o);
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
  });

  it('Sentinel-aware clients of both libraries (ioredis { sentinels, name }, node-redis createSentinel()) through a primary SIGKILL, three sentinels, two replicas: no duplicate, every call within its bound, no DB_UNAVAILABLE', async () => {
    // The settings docs/redis.md gives: min-replicas-to-write 1 on every node, so two replicas:
    // after the failover the new primary still has one replica and keeps accepting writes.
    const safe = ['--min-replicas-to-write', '1', '--min-replicas-max-lag', '10'];
    const primary = await redis('none', safe);
    const replicas = [await redis('none', safe), await redis('none', safe)];
    for (const r of replicas) await r.command('REPLICAOF', '127.0.0.1', String(primary.port));
    for (const r of replicas)
      await waitFor(async () => /master_link_status:up/.test(String(await r.command('INFO', 'replication'))), {
        timeoutMs: 15_000,
        what: "every replica's link to the primary to be up",
      });
    const sentinels = await Promise.all([0, 1, 2].map(() => startSentinel(primary.port)));
    servers.push(...sentinels);
    await waitFor(async () => /num-other-sentinels\W+2\b/.test(JSON.stringify(await sentinels[0]!.command('SENTINEL', 'master', 'idl'))), {
      timeoutMs: 15_000,
      what: 'the first sentinel to see the two others',
    });
    const waitTimeoutMs = 2000;
    const commandTimeoutMs = 500;
    const o = await run(
      'sentinel-aware',
      primary.port,
      4,
      PER_WORKER,
      async (ws) => {
        await untilProgress(ws, PER_WORKER * 0.4);
        await primary.kill();
        await waitFor(
          async () => !String(await sentinels[0]!.command('SENTINEL', 'get-master-addr-by-name', 'idl')).includes(String(primary.port)),
          { timeoutMs: 30_000, what: 'sentinel to stop naming the killed primary' },
        );
      },
      () => ({ sentinels: sentinels.map((s) => s.port) }),
    );
    report('Sentinel-aware clients', o);
    console.log(
      `  longest call per worker (ms): ${o.summaries.map((s) => s.maxCallMs).join(', ')}; errors: ${JSON.stringify(o.summaries.map((s) => s.errors))}`,
    );
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
    // The promoted replica's own incarnation installed the key's window: the workers went on there.
    const newMaster = String(await sentinels[0]!.command('SENTINEL', 'get-master-addr-by-name', 'idl'));
    const promoted = replicas.find((r) => newMaster.includes(String(r.port)))!;
    const runId = /run_id:(\w+)/.exec(String(await promoted.command('INFO', 'server')))![1];
    expect(String(await promoted.command('HGET', 'idlease:seq:{sentinel-aware}', 'inc')).split('/')[0]).toBe(runId);
    for (const s of o.summaries) {
      expect(s.maxCallMs).toBeLessThanOrEqual(waitTimeoutMs + commandTimeoutMs + 300);
      expect(s.errors.DB_UNAVAILABLE ?? 0).toBe(0);
    }
  });

  it('Redis Cluster: the slot of the key migrated to another node (MIGRATE + SETSLOT), the switch following it', async () => {
    const nodes = await Promise.all(
      [0, 1, 2].map(() =>
        redis('none', ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000']),
      ),
    );
    execFileSync(
      'redis-cli',
      ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
      { stdio: 'ignore' },
    );
    const key = 'idlease:seq:{cluster}';
    const slot = String(await nodes[0]!.command('CLUSTER', 'KEYSLOT', key));
    const idOf = async (n: RedisServer) => String(await n.command('CLUSTER', 'MYID'));
    await waitFor(async () => String(await nodes[0]!.command('CLUSTER', 'INFO')).includes('cluster_state:ok'), {
      timeoutMs: 15_000,
      what: 'the cluster to report cluster_state:ok',
    });
    const ranges = (await nodes[0]!.command('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number, string]]>;
    const [, , [, ownerPort]] = ranges.find(([lo, hi]) => Number(slot) >= lo && Number(slot) <= hi)!;
    const source = nodes.find((n) => n.port === Number(ownerPort))!;
    const target = nodes.find((n) => n !== source)!;
    const front = await startTcpSwitch(source.port);
    switches.push(front);
    const o = await run('cluster', front.port, 4, PER_WORKER, async (ws) => {
      await untilProgress(ws, PER_WORKER * 0.4);
      const [sourceId, targetId] = [await idOf(source), await idOf(target)];
      await target.command('CLUSTER', 'SETSLOT', slot, 'IMPORTING', sourceId);
      await source.command('CLUSTER', 'SETSLOT', slot, 'MIGRATING', targetId);
      await source.command('MIGRATE', '127.0.0.1', String(target.port), key, '0', '5000');
      for (const n of nodes) await n.command('CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
      front.pointTo(target.port);
    });
    report('cluster slot migration', o);
    expect(String(await target.command('HGET', key, 'inc')).split('/')[0]).toBe(
      /run_id:(\w+)/.exec(String(await target.command('INFO', 'server')))![1],
    );
    expect(o.total).toBe(4 * PER_WORKER);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
  });

  it('10 processes while stale keys are injected every 10 ms (another incarnation, counter rewound; 100–300 times): re-seeded, never repeated', async () => {
    const r = await redis('none');
    let injected = 0;
    const o = await run('reseed300', r.port, 10, 4_000, async (ws) => {
      await untilProgress(ws, 256);
      // What a restore or a promotion leaves: the key present, its window rewound, another server's identity on it.
      while (injected < 300 && ws.some((w) => w.child.exitCode === null)) {
        await r.command('HSET', 'idlease:seq:{reseed300}', 'inc', `restored/${injected}`, 'off', '0');
        injected++;
        await new Promise((res) => setTimeout(res, 10));
      }
    });
    report(`10 processes, ${injected} injected stale keys`, o);
    expect(injected).toBeGreaterThanOrEqual(100);
    expect(o.total).toBe(10 * 4_000);
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
    expect(sum(o, (s) => s.reseeds)).toBeGreaterThanOrEqual(injected / 2);
  });

  it('connections cut every 40 ms mid-call, both clients (ioredis resends what was on the wire): gaps, never a duplicate', async () => {
    const r = await redis('none');
    const front = await startTcpSwitch(r.port);
    switches.push(front);
    let cuts = 0;
    const o = await run('cuts', front.port, 4, PER_WORKER / 2, async (ws) => {
      await untilProgress(ws, 256);
      while (ws.some((w) => w.child.exitCode === null) && cuts < 150) {
        front.pointTo(r.port); // same server: every open connection is cut, whatever is on the wire
        cuts++;
        await new Promise((res) => setTimeout(res, 40));
      }
    });
    report(`${cuts} connection cuts`, o);
    expect(cuts).toBeGreaterThanOrEqual(20);
    expect(o.total).toBe(4 * (PER_WORKER / 2));
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
  });

  it('8 processes re-seed at once after three empty restarts', async () => {
    const r = await redis('none');
    const o = await run('herd', r.port, 8, PER_WORKER / 2, async (ws) => {
      for (const at of [0.2, 0.45, 0.7]) {
        await untilProgress(ws, (PER_WORKER / 2) * at);
        await r.kill();
        await r.start();
      }
    });
    report('8-process herd', o);
    expect(o.total).toBe(8 * (PER_WORKER / 2));
    expect(o.duplicates).toBe(0);
    expect(o.unordered).toBe(0);
  });
});
