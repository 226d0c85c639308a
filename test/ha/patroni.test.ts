/**
 * Issue 31: failover on a real HA manager, with nobody at the keyboard. Patroni 3 + etcd +
 * three PostgreSQL nodes, clients through HAProxy routing by Patroni's `/primary` check
 * (test/helpers/patroni.ts). No `tag bump`, no callback: whatever fences a promoted server must
 * live in the statement that leases.
 *
 * Each case: three segment processes with production-like leases (`targetLeaseMs` 3000: they hold
 * seconds of IDs in memory) and two snowflake processes (one worker bit: both ids held) draw
 * through HAProxy; the leader's walsenders are paused 3 s so the replicas fall behind (what an
 * asynchronous cluster under load does); then the leader node crashes (Patroni, postmaster and
 * backends SIGKILLed) or `patronictl switchover` runs. The moment HAProxy routes a write to the new
 * leader, three fresh segment processes and two fresh snowflake processes start there. Two Redis
 * sequence processes (node-redis and ioredis, one private redis-server) lease their windows from
 * the same database through HAProxy all along. Every ID is recorded and counted: zero duplicates, every process's IDs increasing, every failed call a
 * typed, retryable error.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { ERROR_CATEGORIES, type IdleaseErrorCode } from '../../src/errors.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/index.js';
import { REPO_ROOT } from '../helpers/cli.js';
import { markHaWorkers, startHaProcess, startHaWorker, stopHaWorkers, tally, type HaWorker } from '../helpers/ha-workers.js';
import { startPatroniCluster, type PatroniCluster } from '../helpers/patroni.js';
import { startRedis, type RedisServer } from '../helpers/redis.js';
import { startRedisWorker, summaryOf } from '../helpers/redis-workers.js';
import type { SnowflakeHaResult } from '../helpers/snowflake-failover-scenario.js';
import { summary } from '../helpers/failover-scenario.js';
import { sleep } from '../helpers/wait.js';

const SNOWFLAKE_WORKER = path.join(REPO_ROOT, 'test/ha/snowflake-ha-worker.ts');

let cluster: PatroniCluster | undefined;
let redis: RedisServer | undefined;
afterEach(async () => {
  const c = cluster;
  cluster = undefined;
  if (!c) return;
  try {
    for (const d of ['segment', 'snowflake-old', 'snowflake-fresh', 'redis'])
      if (existsSync(path.join(c.dir, d))) stopHaWorkers(path.join(c.dir, d));
    writeFileSync(path.join(c.dir, 'go'), ''); // fresh workers still waiting to start
    await sleep(500); // the workers see their stop file and close their connections
  } finally {
    await c.stop();
    await redis?.destroy();
    redis = undefined;
  }
});

type Event = 'crash' | 'switchover';

async function runPatroniFailover(c: PatroniCluster, event: Event) {
  const t0 = Date.now();
  const timeline: Record<string, number> = {};
  const mark = (what: string) => (timeline[what] = Date.now() - t0);
  const knex = connect(c.url(), { poolMax: 1 });
  await migrate(knex, { workers: true });
  await addTag(knex, { tag: 'order', step: 100 });
  await addTag(knex, { tag: 'redis-seq', step: 50 });
  await knex.destroy();
  redis = await startRedis('none');
  const redisDir = path.join(c.dir, 'redis');
  mkdirSync(redisDir);
  // Redis sequences issue inside windows leased from the same segment rows, through HAProxy.
  const redisWorkers = (['node-redis', 'ioredis'] as const).map((client, i) =>
    startRedisWorker(`redis${i}`, redisDir, {
      dbUrl: c.url(),
      redisPort: redis!.port,
      tag: 'redis-seq',
      client,
      count: 10_000_000,
      stopFile: path.join(redisDir, 'stop'),
      pauseMs: 1,
    }),
  );
  const segDir = path.join(c.dir, 'segment');
  const oldSnowDir = path.join(c.dir, 'snowflake-old');
  const freshSnowDir = path.join(c.dir, 'snowflake-fresh');
  for (const d of [segDir, oldSnowDir, freshSnowDir]) mkdirSync(d);
  const goFile = path.join(c.dir, 'go');
  const segment = (name: string, fresh = false) =>
    startHaWorker(name, segDir, {
      ...(fresh ? { goFile } : {}),
      url: c.url(),
      tag: 'order',
      maxStep: 1_000_000,
      targetLeaseMs: 3_000,
      connectTimeoutMs: 1_000,
      waitTimeoutMs: 3_000,
      statementTimeoutMs: 2_000,
      // A service's pace (~3,000 IDs/s a process), not flat out: the machine stays free to start the fresh processes at once.
      pauseMs: 1,
    });
  const snowflake = (name: string, dir: string) =>
    startHaProcess<Omit<SnowflakeHaResult, 'name' | 'file'>>(SNOWFLAKE_WORKER, name, dir, {
      ...(dir === freshSnowDir ? { goFile } : {}),
      url: c.url(),
      leaseTtlMs: 4_000,
      maxLeadMs: 500,
      waitTimeoutMs: 1_000,
    });
  const oldSegments: HaWorker[] = Array.from({ length: 3 }, (_, i) => segment(`old${i}`));
  const oldSnow = [snowflake('old-sf0', oldSnowDir), snowflake('old-sf1', oldSnowDir)];
  await Promise.all([...oldSegments, ...oldSnow].map((w) => w.serving));
  mark('old serving');
  // Leases grow towards 3 s of IDs each.
  await sleep(5_000);
  const leader = await c.waitForLeader();
  const resume = await c.pauseWalSenders();
  mark('walsenders paused');
  await sleep(3_000);
  let newLeader;
  const failedAt = Date.now();
  // Fresh processes load now and make their first call once the go file appears (when HAProxy
  // routes to the new leader): the first lease there races the old processes' retries, as a
  // deployment's new pods would. Spawned afterwards, they lost that race on this loaded machine.
  const freshSegments: HaWorker[] = Array.from({ length: 3 }, (_, i) => segment(`fresh${i}`, true));
  const freshSnow = [snowflake('fresh-sf0', freshSnowDir), snowflake('fresh-sf1', freshSnowDir)];
  if (event === 'crash') {
    await c.crashLeader(); // the paused walsenders die with it: the replicas never get those 3 s
    mark('leader crashed');
    newLeader = await c.waitForLeader({ exclude: [leader], timeoutMs: 90_000 });
  } else {
    resume(); // a switchover's clean shutdown waits for the walsenders to send everything
    newLeader = await c.switchover();
    mark('switchover returned');
  }
  await c.waitForWriteThroughProxy(newLeader, 90_000);
  const failoverMs = Date.now() - failedAt;
  mark('write through HAProxy');
  writeFileSync(goFile, '');
  markHaWorkers(segDir);
  await Promise.race([Promise.all(freshSegments.map((w) => w.serving)), sleep(30_000)]);
  mark('fresh serving');
  // Past the old processes' memory: each leases on the new leader at least once.
  await sleep(6_000);
  stopHaWorkers(oldSnowDir); // first, so that a fresh one cannot take an id an old one gives back on its way out
  const oldSnowResults = await Promise.all(oldSnow.map((w) => w.done));
  stopHaWorkers(redisDir);
  const redisResults = await Promise.all(redisWorkers.map(async (w) => ({ name: w.name, file: w.out, ...(await summaryOf(w)) })));
  stopHaWorkers(freshSnowDir);
  stopHaWorkers(segDir);
  const segResults = await Promise.all([...oldSegments, ...freshSegments].map((w) => w.done));
  const snowResults = [...oldSnowResults, ...(await Promise.all(freshSnow.map((w) => w.done)))];
  mark('stopped');
  return { segResults, snowResults, redisResults, failoverMs, timeline, from: leader.name, to: newLeader.name };
}

function expectSafe(label: string, run: Awaited<ReturnType<typeof runPatroniFailover>>): void {
  const { segResults, snowResults, redisResults, failoverMs, timeline } = run;
  const seg = tally(segResults);
  const snow = tally(snowResults);
  const red = tally(redisResults);
  const redisWhy = redisResults.map((r) => `${r.name}: ${r.done} ids, ${r.windows} windows, errors ${JSON.stringify(r.errors)}`).join('\n');
  const snowWhy = snowResults
    .map(
      (r) =>
        `${r.name}: ${r.ids} ids, claims ${JSON.stringify(r.claims.map((x) => x.workerId))}, waits ${r.failoverWaits}, lost ${r.lost}, errors ${JSON.stringify(r.errors)}, untyped ${r.untyped}`,
    )
    .join('\n');
  const snowLog = snowResults.map((r) => `${r.name}: ${r.leaseErrors} lease errors; ${r.log.join(' | ')}`).join('\n');
  const why = `${summary(segResults)}\n${segResults.map((r) => `${r.name} causes ${JSON.stringify(r.causes)} lease errors ${JSON.stringify(r.leaseErrors)} after failover ${r.ids - (r.idsAtMark ?? 0)}`).join('\n')}\n${snowWhy}\n${snowLog}\n${redisWhy}\ntimeline ${JSON.stringify(timeline)}`;
  console.log(
    `Patroni ${label} (${run.from} → ${run.to}): write through HAProxy ${failoverMs} ms after the event; segments ${seg.total} IDs, ${seg.duplicates} duplicates, ${segResults.reduce((n, r) => n + r.failoverJumps, 0)} failover jump(s); snowflake ${snow.total} IDs, ${snow.duplicates} duplicates; Redis sequence ${red.total} IDs, ${red.duplicates} duplicates\n${why}`,
  );
  const retryable = (codes: Record<string, number>) =>
    Object.keys(codes).every((code) => ERROR_CATEGORIES[code as IdleaseErrorCode] === 'unavailable');
  expect(seg.duplicates, why).toBe(0);
  expect(seg.notIncreasing, why).toEqual([]);
  expect(
    segResults.every((r) => r.untyped === 0 && retryable(r.errors)),
    why,
  ).toBe(true);
  // Old processes served after the failover too, with no restart; fresh ones served.
  expect(
    segResults.every((r) => r.ids > (r.idsAtMark ?? 0)),
    why,
  ).toBe(true);
  expect(snow.duplicates, why).toBe(0);
  expect(snow.notIncreasing, why).toEqual([]);
  expect(
    snowResults.every((r) => r.untyped === 0 && retryable(r.errors)),
    why,
  ).toBe(true);
  expect(seg.total, why).toBeGreaterThan(10_000);
  // The Redis sequences (a worker exits, failing the run, on anything but REDIS_/DB_UNAVAILABLE, e.g. a refused window).
  expect(red.duplicates, why).toBe(0);
  expect(red.notIncreasing, why).toEqual([]);
  expect(
    redisResults.every((r) => r.done > 0),
    why,
  ).toBe(true);
  // One failover, one new instance: the tag's row jumped at most once (a planned switchover costs one gap, not more).
  expect(
    segResults.reduce((n, r) => n + r.failoverJumps, 0),
    why,
  ).toBeLessThanOrEqual(1);
}

describe('Patroni + etcd + HAProxy: no bump, no callback (issue 31)', () => {
  it('asynchronous replication (Patroni default), leader node crashed while the replicas lag: zero duplicates, every failed call typed', async () => {
    cluster = await startPatroniCluster();
    expectSafe('async leader crash', await runPatroniFailover(cluster, 'crash'));
  }, 240_000);

  it('synchronous_mode: true, leader node crashed while the replicas lag: zero duplicates, every failed call typed', async () => {
    cluster = await startPatroniCluster();
    await cluster.setSynchronousMode(true);
    expectSafe('synchronous_mode leader crash', await runPatroniFailover(cluster, 'crash'));
  }, 240_000);

  it('patronictl switchover after the replicas lagged: zero duplicates, every failed call typed', async () => {
    cluster = await startPatroniCluster();
    expectSafe('switchover', await runPatroniFailover(cluster, 'switchover'));
  }, 240_000);
});
