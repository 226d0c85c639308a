/**
 * Segment allocators as OS processes, each in a network namespace of its own, drawing one tag
 * from a private PostgreSQL over a veth (test/helpers/partition.ts), flat out:
 *   - p0 is cut off both ways (its statements hang on open connections);
 *   - p1 loses only what the server sends: its statements reach the server and run, their
 *     answers never arrive (a lease is a read then an UPDATE; which of the two loses its answer
 *     depends on the moment of the cut, so a lost UPDATE answer is possible, not forced);
 *   - p2 is not cut and must not notice.
 * The cut processes serve what they hold in memory, then fail with DB_UNAVAILABLE, each call
 * within waitTimeoutMs; after the heal they draw again without a restart. Every ID counted: no
 * duplicate, each process strictly increasing, no untyped failure.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHaWorker, stopHaWorkers, tally } from '../helpers/ha-workers.js';
import { createPartitionNet, type PartitionNet } from '../helpers/partition.js';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';

const BOUNDS = { waitTimeoutMs: 2_000, statementTimeoutMs: 1_000, connectTimeoutMs: 1_000 };
/** Long enough for several calls to fail in a row, and for TCP to back its retransmissions off to seconds. */
const CUT_MS = 8_000;
/** A failed call may end this much past waitTimeoutMs: timers on a loaded 2-core machine. */
const SLACK_MS = 500;
/**
 * After the heal a cut process draws again within the attempt in flight (a statement given up
 * at statementTimeoutMs or a connect at connectTimeoutMs, 1 s) plus the lease loop's backoff,
 * by then at retryMaxMs (2 s) + 25 % jitter, plus slack.
 */
const BACK_WITHIN_MS = 1_000 + 2_500 + SLACK_MS;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('segment allocators behind a partitionable link (PostgreSQL)', () => {
  let pnet: PartitionNet;
  let pg: PostgresInstance;
  let dir: string;

  beforeAll(async () => {
    pnet = createPartitionNet({ links: 3 });
    pg = await startPostgres({ settings: { listen_addresses: `127.0.0.1,${pnet.serverAddress}` }, trustNetworks: [pnet.clientNetwork] });
    const knex = connect(pg.url, { poolMax: 1 });
    await migrate(knex);
    await addTag(knex, { tag: 'order' });
    await knex.destroy();
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-partition-segment-'));
  });
  afterAll(async () => {
    pnet?.destroy();
    await pg?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('cut off: memory, then DB_UNAVAILABLE within waitTimeoutMs; back after the heal without restart; 0 duplicates', async () => {
    const url = `postgres://postgres@${pnet.serverAddress}:${pg.port}/postgres`;
    const workers = pnet.links.map((link, i) =>
      startHaWorker(`p${i}`, dir, { url, tag: 'order', maxStep: 1_000, pauseMs: 1, ...BOUNDS }, link.spawn),
    );
    await Promise.all(workers.map((w) => w.serving));
    await sleep(500);
    const size = (i: number) => statSync(path.join(dir, `p${i}.bin`)).size;

    pnet.links[0]!.cut();
    pnet.links[1]!.cut('from-server');
    const cutAt = Date.now();
    const atCut = [0, 1].map(size);
    await sleep(CUT_MS);
    const beforeHeal = [0, 1].map(size);
    pnet.links[0]!.heal();
    pnet.links[1]!.heal();
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
    console.log(
      JSON.stringify({
        ids: t.total,
        duplicates: t.duplicates,
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
  });
});
