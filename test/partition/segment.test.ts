/**
 * Segment allocators as OS processes, each in a network namespace of its own, drawing one tag
 * from a private PostgreSQL or MariaDB over a veth (test/helpers/partition.ts), flat out:
 *   - p0 is cut off both ways (its statements hang on open connections);
 *   - p1 loses only what the server sends, and the cut is made while p1's lease UPDATE waits
 *     on the tag row's lock, which this process holds and then releases: the UPDATE runs and
 *     commits, its answer never arrives. That lease is forced, not left to the moment of the cut;
 *   - p2 is not cut and must not notice.
 * A trigger logs every lease (old max_id, new max_id, the client's address), so each ID in each
 * file is checked against the ranges its own process leased, and the range whose answer was
 * lost must be served by nobody. The cut processes serve what they hold in memory, then fail
 * with DB_UNAVAILABLE, each call within waitTimeoutMs; after the heal they draw again without a
 * restart. Every ID counted: no duplicate, each process strictly increasing, no untyped failure.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readIds, startHaWorker, stopHaWorkers, tally } from '../helpers/ha-workers.js';
import { createPartitionNet, type PartitionNet } from '../helpers/partition.js';
import type { ServerInstance } from '../helpers/servers.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import { partitionServer, type PartitionFlavor } from './servers.js';
import { sleep } from '../helpers/wait.js';

const BOUNDS = { waitTimeoutMs: 2_000, statementTimeoutMs: 1_000, connectTimeoutMs: 1_000 };
/**
 * Long enough for several calls to fail in a row, and for TCP to back its retransmissions off to
 * seconds. MariaDB, run for the other lease SQL (LAST_INSERT_ID in the OK packet), cuts shorter.
 */
const CUT_MS: Record<PartitionFlavor, number> = { postgres: 8_000, mysql: 5_000 };
/** A failed call may end this much past waitTimeoutMs: timers on a loaded 2-core machine. */
const SLACK_MS = 500;
/**
 * After the heal a cut process draws again within the attempt in flight (a statement given up
 * at statementTimeoutMs or a connect at connectTimeoutMs, 1 s) plus the lease loop's backoff,
 * by then at retryMaxMs (2 s) + 25 % jitter, plus slack.
 */
const BACK_WITHIN_MS = 1_000 + 2_500 + SLACK_MS;

const SEGMENTS = { postgres: 'idlease.idlease_segments', mysql: 'idlease_segments' };
/** int8 read back as text: exact, whatever the driver's parsers. */
const TEXT = { postgres: 'text', mysql: 'CHAR' };
/** The client address of every lease UPDATE waiting for a row lock right now. */
const WAITING_UPDATES = {
  postgres: `SELECT host(client_addr) AS a FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE%'`,
  // The lease UPDATE is the only UPDATE of the row, and the row is ours: every one listed waits.
  mysql: `SELECT SUBSTRING_INDEX(host, ':', 1) AS a FROM information_schema.processlist WHERE command = 'Query' AND info LIKE 'UPDATE%'`,
};
/**
 * Every lease is exactly this: the tag's row step (addTag's default, 1,000) is the floor of the
 * step the allocator chooses and maxStep its ceiling. So the lease that runs first once the row
 * is released covers (max_id at the release, + STEP].
 */
const STEP = 1_000;

describe.each(['postgres', 'mysql'] as const)('segment allocators behind a partitionable link (%s)', (flavor) => {
  let pnet: PartitionNet;
  let server: ServerInstance;
  let remoteUrl: string;
  let knex: Knex;
  let dir: string;
  /** Rows of a raw query: pg answers { rows }, mysql2 [rows, fields]. */
  const rows = async <T>(sql: string, values: readonly unknown[] = [], on: Knex | Knex.Transaction = knex): Promise<T[]> => {
    const r = await on.raw(sql, values as Knex.RawBinding[]);
    return (flavor === 'mysql' ? r[0] : r.rows) as T[];
  };

  beforeAll(async () => {
    pnet = createPartitionNet({ links: 3 });
    ({ server, remoteUrl } = await partitionServer(flavor, pnet));
    knex = connect(server.url, { poolMax: 3 });
    await migrate(knex);
    await addTag(knex, { tag: 'order' });
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-partition-segment-'));
  });
  afterAll(async () => {
    pnet?.destroy();
    await knex?.destroy();
    await server?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('cut off, and a lease UPDATE whose answer is lost: memory, then DB_UNAVAILABLE within waitTimeoutMs; the lost range served by nobody; back after the heal without restart; 0 duplicates', async () => {
    const workers = pnet.links.map((link, i) =>
      startHaWorker(`p${i}`, dir, { url: remoteUrl, tag: 'order', maxStep: STEP, pauseMs: 1, ...BOUNDS }, link.spawn),
    );
    await Promise.all(workers.map((w) => w.serving));
    await sleep(500);
    // connect() turns TCP keepalive on (keepAliveMs, 10 s): the kernel keeps its timer on the
    // workers' connections. It probes idle connections only (see docs/failover.md).
    const sockets = () =>
      execFileSync('ip', ['netns', 'exec', pnet.links[2]!.ns, 'ss', '-tnoH', 'dst', pnet.serverAddress], { encoding: 'utf8' });
    for (const end = Date.now() + 5_000; !/timer:\(keepalive,/.test(sockets()); await sleep(50)) {
      if (Date.now() > end) throw new Error(`no keepalive timer on p2's connections:\n${sockets()}`);
    }
    const size = (i: number) => statSync(path.join(dir, `p${i}.bin`)).size;
    const [l0, l1] = [pnet.links[0]!, pnet.links[1]!];

    // p0 first: cut both ways, it never reaches the row again until the heal.
    l0.cut();
    const cutAt = Date.now();
    // Hold the tag row until p1's lease UPDATE is the first to wait behind us (else let go and try
    // again: p2 must not be held for long); then cut p1's answers and release the row. p1's UPDATE
    // runs first and commits, and its answer is dropped: the range (row at release, + STEP].
    let lockHeldMs = 0;
    let attempts = 0;
    let maxAtCut: bigint | undefined;
    const text = (sql: string, on: Knex | Knex.Transaction) => rows<{ m: string }>(sql, [], on).then((r) => BigInt(r[0]!.m));
    const readMax = (on: Knex | Knex.Transaction = knex) =>
      text(`SELECT CAST(max_id AS ${TEXT[flavor]}) AS m FROM ${SEGMENTS[flavor]} WHERE tag = 'order'`, on);
    while (maxAtCut === undefined) {
      if (++attempts > 30) throw new Error("p1's lease UPDATE was never the first to wait on the row lock");
      await knex.transaction(async (trx) => {
        const locked = Date.now();
        await trx.raw(`SELECT max_id FROM ${SEGMENTS[flavor]} WHERE tag = 'order' FOR UPDATE`);
        let waiting: string[] = [];
        while (waiting.length === 0 && Date.now() - locked < 1_500) {
          await sleep(5);
          waiting = (await rows<{ a: string }>(WAITING_UPDATES[flavor])).map((r) => r.a);
        }
        if (waiting.length !== 1 || waiting[0] !== l1.address) return;
        l1.cut('from-server');
        maxAtCut = await readMax(trx);
        lockHeldMs = Date.now() - locked;
      });
      if (maxAtCut === undefined) await sleep(20);
    }
    const lostRange = { from: maxAtCut, to: maxAtCut + BigInt(STEP) };
    const atCut = [0, 1].map(size);
    // p1's UPDATE ran behind the cut: nothing of p1's waits for the row any more, and the row moved past its range.
    for (const end = Date.now() + 5_000; (await rows<{ a: string }>(WAITING_UPDATES[flavor])).some((r) => r.a === l1.address);) {
      if (Date.now() > end) throw new Error("p1's lease UPDATE still waits 5 s after the row was released");
      await sleep(10);
    }
    expect(await readMax()).toBeGreaterThanOrEqual(lostRange.to);
    await sleep(CUT_MS[flavor]);
    const beforeHeal = [0, 1].map(size);
    l0.heal();
    l1.heal();
    const healAt = Date.now();
    // Back without a restart: each cut process's file grows again (it flushes every 256 IDs).
    const backAfterMs: number[] = [];
    for (const i of [0, 1]) {
      while (size(i) === beforeHeal[i]) {
        if (Date.now() - healAt > 30_000) throw new Error(`p${i} drew nothing for 30 s after the heal`);
        await sleep(20);
      }
      backAfterMs[i] = Date.now() - healAt;
    }
    await sleep(500);
    stopHaWorkers(dir);
    const stopAt = Date.now();
    const results = await Promise.all(workers.map((w) => w.done));
    const stoppedMs = Date.now() - stopAt;

    expect(Math.max(...backAfterMs)).toBeLessThan(BACK_WITHIN_MS);

    const t = tally(results);
    expect(t.duplicates).toBe(0);
    expect(t.notIncreasing).toEqual([]);
    for (const r of results) expect(r.untyped, r.name).toBe(0);
    const [p0, p1, p2] = results;
    expect(p2!.errors, 'p2 was never cut').toEqual({});
    for (const r of [p0!, p1!]) {
      expect(Object.keys(r.errors), `${r.name}: ${JSON.stringify(r)}`).toEqual(['DB_UNAVAILABLE']);
      expect(r.maxFailMs, r.name).toBeLessThanOrEqual(BOUNDS.waitTimeoutMs + SLACK_MS);
    }

    // The range whose answer was lost is served by nobody.
    let inLost = 0;
    for (const r of results) for (const id of readIds(r.file)) if (id > lostRange.from && id <= lostRange.to) inLost++;
    expect(inLost, `IDs served from the range whose answer was lost (${lostRange.from}, ${lostRange.to}]`).toBe(0);
    console.log(
      JSON.stringify({
        flavor,
        ids: t.total,
        duplicates: t.duplicates,
        lockAttempts: attempts,
        lostRange: `(${lostRange.from}, ${lostRange.to}]`,
        lockHeldMs,
        cutMs: healAt - cutAt,
        // Drawn from memory after the cut (files grow by 256 IDs at a time).
        idsAfterCut: [0, 1].map((i) => (beforeHeal[i]! - atCut[i]!) / 8),
        failed: results.map((r) => r.errors),
        maxFailMs: results.map((r) => r.maxFailMs),
        leaseErrors: results.map((r) => r.leaseErrors),
        backAfterHealMs: backAfterMs,
        stoppedMs,
      }),
    );
  }, 90_000);
});
