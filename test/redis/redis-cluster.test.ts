/**
 * The Redis sequence on a Redis Cluster (3 masters + 3 replicas, private redis-servers): 4 OS
 * processes (2 on node-redis createCluster(), 2 on ioredis Cluster) draw 8 tags while a master is
 * SIGKILLed (its replica promoted), a replica takes over by CLUSTER FAILOVER, a tag's slot is
 * migrated to another master (what `redis-cli --cluster reshard` does) and the killed node comes
 * back as a replica. Every ID is recorded: 0 duplicates per tag, each process's IDs strictly
 * increasing per tag, every failed call typed and within its bound, every process drawing every
 * tag again after each fault (recovery times printed). Then the CLI and serve on the same cluster,
 * by its redis+cluster:// URL. The windows' database side is PostgreSQL.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';
import { countIds } from '../helpers/redis-workers.js';
import { REPO_ROOT, runCli } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';
import { startServe } from '../helpers/serve-process.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import type { RedisServer } from '../helpers/redis.js';
import { sleep, waitFor } from '../helpers/wait.js';

const TAGS = ['c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7'];
const WAIT_MS = 2000;
const COMMAND_MS = 500;
const key = (tag: string) => `idlease:seq:{${tag}}`;

let db: TestDb;
let cluster: RedisCluster | undefined;
const dirs: string[] = [];
const children: ChildProcess[] = [];

beforeAll(async () => {
  db = await createTestDb('postgres', 'rcluster');
  await migrate(db.knex);
  for (const tag of TAGS) await addTag(db.knex, { tag, step: 100 });
  cluster = await startRedisCluster(3, 1);
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await cluster?.destroy();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  await db?.drop();
});

interface Summary {
  counts: Record<string, number>;
  errors: Record<string, number>;
  failures: Array<{ tag: string; code: string; ms: number; at: number }>;
  stalls: Array<{ tag: string; from: number; to: number }>;
  reseeds: number;
  maxCallMs: number;
}

interface Worker {
  name: string;
  out: string;
  progress: Record<string, number>;
  done: Promise<Summary>;
}

function startWorker(name: string, dir: string, client: 'node-redis' | 'ioredis', stopFile: string): Worker {
  const out = path.join(dir, name);
  const cfg = {
    dbUrl: db.url,
    ports: cluster!.nodes.map((n) => n.port),
    tags: TAGS,
    client,
    out,
    stopFile,
    waitTimeoutMs: WAIT_MS,
    commandTimeoutMs: COMMAND_MS,
  };
  const child = spawn(process.execPath, [builtWorker('test/redis/redis-cluster-worker.ts'), JSON.stringify(cfg)], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  const w: Worker = { name, out, progress: {}, done: undefined as unknown as Promise<Summary> };
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => {
    stdout += d.toString();
    const lines = stdout.slice(-4000).match(/progress (\{.*\})\n/g);
    if (lines) w.progress = JSON.parse(lines[lines.length - 1]!.slice(9)) as Record<string, number>;
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  w.done = new Promise((resolve, reject) =>
    // 'close': after the pipes are drained ('exit' may come before the summary line is read).
    child.once('close', (code) => {
      const line = /summary (.*)\n/.exec(stdout);
      if (code !== 0 || !line) reject(new Error(`worker ${name} exited ${code}: ${stderr.slice(-2000)}`));
      else resolve(JSON.parse(line[1]!) as Summary);
    }),
  );
  return w;
}

/** Until every worker drew every tag past where it stood at `since`; ms taken. */
async function untilAllDraw(ws: Worker[], snapshot: Array<Record<string, number>>, timeoutMs = 20_000): Promise<number> {
  const t0 = Date.now();
  for (;;) {
    const behind = ws.flatMap((w, i) => TAGS.filter((t) => (w.progress[t] ?? 0) <= (snapshot[i]![t] ?? 0)).map((t) => `${w.name}/${t}`));
    if (behind.length === 0) return Date.now() - t0;
    if (Date.now() - t0 > timeoutMs) throw new Error(`not drawing again within ${timeoutMs} ms: ${behind.join(', ')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const snap = (ws: Worker[]) => ws.map((w) => ({ ...w.progress }));

const incOf = async (n: RedisServer, tag: string) => String(await n.command('HGET', key(tag), 'inc'));
const identityOf = async (n: RedisServer) => {
  const info = String(await n.command('INFO', 'server', 'replication'));
  return `${/run_id:(\w+)/.exec(info)![1]}/${/master_replid:(\w+)/.exec(info)![1]}`;
};

it('3 masters + 3 replicas, 4 processes (2 per client library), 8 tags: a master SIGKILLed, a CLUSTER FAILOVER, a slot migrated, the killed node back as a replica: 0 duplicates, increasing per process and tag, every failed call typed and within its bound', async () => {
  const c = cluster!;
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-rcluster-'));
  dirs.push(dir);
  const stopFile = path.join(dir, 'stop');
  const slotOf = new Map<string, number>();
  for (const t of TAGS) slotOf.set(t, await c.keySlot(key(t)));
  // The tags spread over the masters (the hash tag is the tag): every master holds at least one.
  const masterOfTag = async (t: string) => c.masterOf(slotOf.get(t)!);
  const holders = new Set(await Promise.all(TAGS.map(async (t) => (await masterOfTag(t)).port)));
  expect(holders.size).toBe(3);

  const ws = [0, 1, 2, 3].map((i) => startWorker(`w${i}`, dir, i % 2 ? 'ioredis' : 'node-redis', stopFile));
  /** When each fault was injected: the recovery time is the longest pause of any process's draws of any tag across it. */
  const faults: Record<string, number> = {};
  /** A snapshot of every process's counts once the fault has hit (300 ms on): each must move past it. */
  const hit = async () => {
    await sleep(300);
    return snap(ws);
  };
  // Four worker processes starting on a loaded 2-core machine: their start is not what is measured.
  await untilAllDraw(
    ws,
    ws.map(() => ({})),
    120_000,
  );
  await sleep(1_000);

  // 1. A master SIGKILLed: its replica is promoted after cluster-node-timeout (1 s).
  const killed = await masterOfTag('c0');
  faults['master SIGKILL'] = Date.now();
  await killed.kill();
  let s = await hit();
  await waitFor(async () => (await masterOfTag('c0')) !== killed, {
    timeoutMs: 20_000,
    what: "another node to serve c0's slot after the SIGKILL",
  });
  await untilAllDraw(ws, s);
  const promoted = await masterOfTag('c0');
  // The promoted replica's own incarnation installed c0's window: the database fenced it.
  await waitFor(async () => (await incOf(promoted, 'c0')) === (await identityOf(promoted)), {
    timeoutMs: 20_000,
    what: 'the promoted node to stamp its identity on c0',
  });
  await sleep(1_000);

  // 2. CLUSTER FAILOVER: a replica of another master takes over, coordinated.
  const roles = await c.roles();
  const other = roles.find((r) => r.master !== promoted && r.replicas.length > 0)!;
  const tagsOfOther: string[] = [];
  for (const t of TAGS) if ((await masterOfTag(t)) === other.master) tagsOfOther.push(t);
  faults['CLUSTER FAILOVER'] = Date.now();
  await other.replicas[0]!.command('CLUSTER', 'FAILOVER');
  s = await hit();
  await waitFor(async () => /role:master/.test(String(await other.replicas[0]!.command('INFO', 'replication'))), {
    timeoutMs: 20_000,
    what: 'the replica to become master after CLUSTER FAILOVER',
  });
  await untilAllDraw(ws, s);
  await waitFor(async () => (await incOf(other.replicas[0]!, tagsOfOther[0]!)) === (await identityOf(other.replicas[0]!)), {
    timeoutMs: 20_000,
    what: 'the new master to stamp its identity on its first tag',
  });
  await sleep(1_000);

  // 3. A tag's slot migrated to another master mid-run.
  const migrated = TAGS.find((t) => t !== 'c0' && !tagsOfOther.includes(t))!;
  const from = await masterOfTag(migrated);
  const to = (await c.roles()).map((r) => r.master).find((m) => m !== from)!;
  faults['slot migrated'] = Date.now();
  await c.migrateSlot(slotOf.get(migrated)!, to);
  s = await hit();
  await untilAllDraw(ws, s);
  expect(await masterOfTag(migrated)).toBe(to);
  await waitFor(async () => (await incOf(to, migrated)) === (await identityOf(to)), {
    timeoutMs: 20_000,
    what: "the migrated slot's new node to stamp its identity on the tag",
  });
  await sleep(1_000);

  // 4. The killed node back: a replica of the node that took its slots.
  faults['killed node back as a replica'] = Date.now();
  await killed.start();
  s = await hit();
  await waitFor(async () => /role:slave[\s\S]*master_link_status:up/.test(String(await killed.command('INFO', 'replication'))), {
    timeoutMs: 20_000,
    what: 'the killed node to rejoin as a replica with its link up',
  });
  await untilAllDraw(ws, s);
  await sleep(1_000);

  writeFileSync(stopFile, '');
  const summaries = await Promise.all(ws.map((w) => w.done));
  const bound = WAIT_MS + COMMAND_MS + 300;
  let total = 0;
  for (const t of TAGS) {
    const o = countIds(ws.map((w) => `${w.out}-${t}.bin`));
    total += o.total;
    expect({ tag: t, duplicates: o.duplicates, unordered: o.unordered }).toEqual({ tag: t, duplicates: 0, unordered: 0 });
  }
  const failures = summaries.flatMap((x) => x.failures);
  const stalls = summaries.flatMap((x) => x.stalls);
  // From the fault to the first answer after the longest pause it caused (0: nothing paused > 100 ms).
  const recovery = Object.fromEntries(
    Object.entries(faults).map(([name, at]) => [
      name,
      Math.max(0, ...stalls.filter((st) => st.to >= at && st.from <= at + 2_000).map((st) => st.to - Math.max(at, st.from))),
    ]),
  );
  console.log(
    `Redis Cluster (3+3, 4 processes, 8 tags): ${total} IDs, 0 duplicates; reseeds ${summaries.map((x) => x.reseeds).join(', ')}; ` +
      `recovery (fault → the last paused tag drawing again, ms): ${JSON.stringify(recovery)}; longest call per process (ms): ${summaries.map((x) => x.maxCallMs).join(', ')}; ` +
      `failed calls: ${JSON.stringify(summaries.map((x) => x.errors))}`,
  );
  expect(total).toBeGreaterThan(8 * 4 * 100);
  for (const f of failures) {
    expect(['REDIS_UNAVAILABLE', 'DB_UNAVAILABLE']).toContain(f.code);
    expect(f.ms).toBeLessThanOrEqual(bound);
  }
  for (const x of summaries) expect(x.maxCallMs).toBeLessThanOrEqual(bound);
  // The new incarnations were met (by whichever process called first on each).
  expect(summaries.reduce((a, x) => a + x.reseeds, 0)).toBeGreaterThanOrEqual(3);

  // The CLI and serve take the cluster by its URL.
  const next = await runCli(['--url', db.url, 'redis', 'next', 'c3', '-n', '3', '--redis-url', c.url]);
  expect(next.code, next.stderr).toBe(0);
  const ids = next.stdout.trim().split('\n').map(BigInt);
  expect(ids).toHaveLength(3);
  const status = await runCli(['--url', db.url, 'redis', 'status', 'c3', '--json'], { env: { ...process.env, REDIS_URL: c.url } });
  expect(status.code, status.stderr).toBe(0);
  expect(JSON.parse(status.stdout)).toMatchObject({ key: 'idlease:seq:{c3}', state: 'live' });
  const serve = await startServe(db.url, ['--tags', 'c3', '--redis-url', c.url]);
  try {
    const r = await fetch(`${serve.url}/api/redis/get/c3`);
    expect(r.status).toBe(200);
    expect(BigInt(await r.text())).toBeGreaterThan(ids[2]!);
  } finally {
    await serve.stop();
  }
}, 300_000);
