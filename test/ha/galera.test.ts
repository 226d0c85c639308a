/**
 * Issue 13: idlease on a 3-node MariaDB Galera cluster (test/helpers/galera.ts), one cluster
 * for the whole file:
 *   - the cluster forms and replicates;
 *   - segments: 6 processes (2 per node), one tag, maxStep 100, node 3 SIGKILLed and restarted
 *     mid-run: zero duplicates, no call fails for a certification conflict (1213), and while
 *     all nodes are up no node's processes draw less than a quarter of another's;
 *   - tickets, one server (database) per node: refused at start while Galera controls the
 *     auto-increment pair; with wsrep_auto_increment_control=OFF a node leaves and rejoins
 *     with no server refused (no flapping, no ID thrown away) and zero duplicates.
 * Wall time: about 1.5–2 min on 2 shared cores (cluster start ~15 s, segments ~40 s, tickets ~25 s).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, listTags } from '../../src/segment/index.js';
import { createTicketAllocator, type TicketEvent } from '../../src/ticket/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { instanceExpression } from '../../src/dialects/instance.js';
import { createKnexWorkerIdStore, newHolder } from '../../src/snowflake/worker-store.js';
import { startGalera, type GaleraCluster } from '../helpers/galera.js';
import { markHaWorkers, startHaWorker, stopHaWorkers, tally, type HaWorker, type HaWorkerResult } from '../helpers/ha-workers.js';
import { sleep } from '../helpers/wait.js';

/** The bounds docs/failover.md recommends on Galera: above the production ~5 s stall when a node dies. */
const GALERA_BOUNDS = { waitTimeoutMs: 10_000, statementTimeoutMs: 8_000 };

let cluster: GaleraCluster;
beforeAll(async () => {
  cluster = await startGalera();
}, 120_000);
afterAll(async () => {
  await cluster?.destroy();
});

describe('MariaDB Galera (HA)', () => {
  it('three nodes form one cluster and replicate writes', async () => {
    for (const i of [0, 1, 2]) expect(cluster.sql(i, "SHOW STATUS LIKE 'wsrep_cluster_size'")).toMatch(/\t3$/m);
    cluster.sql(0, 'CREATE TABLE test.smoke (id int PRIMARY KEY); INSERT INTO test.smoke VALUES (1)');
    expect(cluster.sql(2, 'SET SESSION wsrep_sync_wait = 1; SELECT COUNT(*) FROM test.smoke').trim()).toBe('1');
    cluster.sql(0, 'DROP TABLE test.smoke');
  });
});

describe('snowflake worker ids on Galera (HA, issue 24)', () => {
  it('every node is one instance (the cluster state UUID): a claim on any node finds the marker naming it and never waits', async () => {
    const seen = [0, 1, 2].map((i) => cluster.sql(i, `SELECT ${instanceExpression('mysql')}`).trim());
    expect(seen[0]).toMatch(/^galera:[0-9a-f-]{36}$/);
    expect(new Set(seen).size).toBe(1);
    const admin = connect(cluster.nodes[0]!.url, { poolMax: 1 });
    await migrate(admin, { segments: false, workers: true });
    await admin.destroy();
    for (const node of cluster.nodes) {
      const knex = connect(node.url, { poolMax: 1 });
      try {
        const claim = await createKnexWorkerIdStore(knex, { schema: undefined, table: 'idlease_workers' }).claim(
          'galera',
          7,
          newHolder(),
          60_000,
        );
        expect(claim).toMatchObject({ workerId: node.index, instance: seen[0], markedInstance: seen[0] });
      } finally {
        await knex.destroy();
      }
    }
  });
});

function perNode(results: readonly HaWorkerResult[], pick: (r: HaWorkerResult) => number): number[] {
  return [0, 1, 2].map((n) => results.filter((r) => r.name.startsWith(`n${n + 1}`)).reduce((s, r) => s + pick(r), 0));
}

describe('segment allocators on Galera (HA)', () => {
  it('6 processes on 3 nodes, one node killed and restarted: zero duplicates, no 1213 failures, fair draws', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'idlease-ha-galera-'));
    try {
      const admin = connect(cluster.nodes[0]!.url, { poolMax: 1 });
      await migrate(admin);
      await addTag(admin, { tag: 'order', step: 100 });
      await admin.destroy();
      const workers: HaWorker[] = [];
      for (const node of cluster.nodes) {
        for (const k of [0, 1])
          workers.push(startHaWorker(`n${node.index + 1}p${k}`, dir, { url: node.url, tag: 'order', maxStep: 100, ...GALERA_BOUNDS }));
      }
      await Promise.all(workers.map((w) => w.serving));
      await sleep(5_000); // the point: every node serves for a while, the steps growing
      markHaWorkers(dir); // fairness is judged on what was drawn while every node was up
      await sleep(300); // the workers read the mark before the kill
      await cluster.kill(2);
      await sleep(2_000); // the point: the two others serve with a node gone
      await cluster.start(2);
      await sleep(2_000); // the point: the rejoined node serves again
      stopHaWorkers(dir);
      const results = await Promise.all(workers.map((w) => w.done));
      const { total, duplicates, notIncreasing } = tally(results);
      const fair = perNode(results, (r) => r.idsAtMark ?? 0);
      const why =
        `per node while all up: ${fair.join(' / ')}\n` +
        results
          .map(
            (r) =>
              `${r.name}: ${r.ids} ids (${r.idsAtMark} at mark), ${r.leases} leases, errors ${JSON.stringify(r.errors)} causes ${JSON.stringify(r.causes)} lease errors ${JSON.stringify(r.leaseErrors)}`,
          )
          .join('\n');
      console.log(`Galera segments: ${total} ids\n${why}`);
      expect(duplicates, why).toBe(0);
      expect(notIncreasing, why).toEqual([]);
      expect(
        results.every((r) => r.untyped === 0 && r.regressions === 0),
        why,
      ).toBe(true);
      expect(
        results.every((r) => Object.keys(r.errors).every((c) => c === 'DB_UNAVAILABLE')),
        why,
      ).toBe(true);
      // A failed call may name the killed node (connection refused), never a certification conflict.
      expect(
        results.every((r) => r.causes['1213'] === undefined),
        why,
      ).toBe(true);
      // Processes on the surviving nodes usually see no failed call; on a loaded machine the
      // cluster can go non-primary for a moment while the node rejoins (1047), and then a call
      // fails with DB_UNAVAILABLE like any other outage (asserted above: typed, never 1213).
      // Same demand (every process draws flat out, two per node): no node starves. The issue
      // measured 20–140× between nodes before the 1213 retry; after it, 1.2–3.8× on a quiet
      // machine and 4.6× once with three other test runs on the two cores (certification favours
      // whichever node commits first, and CPU contention decides that). A tenth is the guard.
      expect(Math.min(...fair) * 10, why).toBeGreaterThanOrEqual(Math.max(...fair));
      expect(
        results.every((r) => r.ids > r.idsAtMark!),
        why,
      ).toBe(true);
      // One instance for the cluster: leases on every node, a node killed and back, and the row never jumped.
      const check = connect(cluster.nodes[0]!.url, { poolMax: 1 });
      try {
        const row = (await listTags(check)).find((r) => r.tag === 'order')!;
        expect(row.instance).toMatch(/^galera:/);
        expect(row.jumps, why).toBe(0);
      } finally {
        await check.destroy();
      }
    } finally {
      stopHaWorkers(dir);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});

describe('ticket servers on Galera, one database per node (HA)', () => {
  it('refused at start while wsrep_auto_increment_control=ON; with OFF a node leaves and rejoins: no flapping, no ID thrown away, zero duplicates', async () => {
    const dbs = ['idl_tk1', 'idl_tk2', 'idl_tk3'];
    cluster.sql(0, dbs.map((d) => `CREATE DATABASE IF NOT EXISTS ${d};`).join(' '));
    for (const node of cluster.nodes) {
      const k = connect(node.urlFor(dbs[node.index]!), { poolMax: 1 });
      await migrate(k, { segments: false, tickets: { increment: 3, offset: node.index + 1 } });
      await k.destroy();
    }
    const knexes = cluster.nodes.map((n) => connect(n.urlFor(dbs[n.index]!), { poolMax: 2 }));
    const make = (onEvent?: (e: TicketEvent) => void) =>
      createTicketAllocator({
        servers: cluster.nodes.map((n) => ({ knex: knexes[n.index]!, offset: n.index + 1, name: `node${n.index + 1}` })),
        statementTimeoutMs: GALERA_BOUNDS.statementTimeoutMs,
        timeoutMs: GALERA_BOUNDS.waitTimeoutMs,
        onEvent,
      });
    try {
      const refused = make();
      await expect(refused.ready()).rejects.toThrow(/wsrep_auto_increment_control=ON[\s\S]*SET GLOBAL wsrep_auto_increment_control = OFF/);
      await refused.close();

      for (const i of [0, 1, 2]) cluster.sql(i, 'SET GLOBAL wsrep_auto_increment_control = OFF');
      const events: TicketEvent[] = [];
      const ids: bigint[] = [];
      let idsAtRejoin: number | undefined;
      const tickets = make((e) => {
        events.push(e);
        if (e.type === 'server-up' && e.server === 'node2') idsAtRejoin = ids.length;
      });
      await tickets.ready();
      const failures: Record<string, number> = {};
      let stop = false;
      const caller = async () => {
        while (!stop) {
          try {
            ids.push(await tickets.next());
          } catch (err) {
            const code = isIdleaseError(err) ? err.code : 'untyped';
            failures[code] = (failures[code] ?? 0) + 1;
          }
        }
      };
      const callers = Array.from({ length: 8 }, caller);
      await sleep(2_000); // the point: tickets drawn from every node first
      await cluster.kill(1);
      await sleep(2_000); // the point: the others draw with a node gone
      await cluster.start(1, ['--wsrep-auto-increment-control=OFF']); // as my.cnf would have it
      // The allocator probes a down server with backoff up to backoffMaxMs (5 s): wait for it.
      for (let i = 0; i < 120 && idsAtRejoin === undefined; i++) await sleep(100);
      await sleep(1_500); // the point: draws on the rejoined node beside the others
      stop = true;
      await Promise.all(callers);
      const stats = tickets.stats();
      await tickets.close();
      const sorted = [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      let duplicates = 0;
      for (let i = 1; i < sorted.length; i++) if (sorted[i] === sorted[i - 1]) duplicates++;
      const byResidue = [1n, 2n, 0n].map((r) => ids.filter((id) => id % 3n === r).length);
      const health = events
        .filter((e) => e.type === 'server-down' || e.type === 'server-up')
        .map((e) => `${e.type}:${(e as { server: string }).server}:${(e as { health?: string }).health ?? ''}`);
      const why = `ids ${ids.length}, per node ${byResidue.join(' / ')}, failures ${JSON.stringify(failures)}, health events ${JSON.stringify(health)}, stats ${JSON.stringify(stats, (_, v) => (typeof v === 'bigint' ? v.toString() : v))}`;
      console.log(`Galera tickets: ${why}`);
      expect(duplicates, why).toBe(0);
      // No ID refused for a wrong residue (thrown away), no server flapping between refused and up.
      expect(
        health.filter((h) => h.endsWith(':refused')),
        why,
      ).toEqual([]);
      expect(failures.INVARIANT, why).toBeUndefined();
      // The killed node's server went down and came back. (During the stall the others may be
      // marked down for a moment too — down, never refused.)
      expect(
        health.filter((h) => h.includes(':node2:')),
        why,
      ).toEqual(['server-down:node2:down', 'server-up:node2:']);
      // A call fails only as an outage (DB_UNAVAILABLE, when the cluster is non-primary for a moment).
      expect(
        Object.keys(failures).filter((c) => c !== 'DB_UNAVAILABLE'),
        why,
      ).toEqual([]);
      // The rejoined node serves again.
      expect(ids.slice(idsAtRejoin).filter((id) => id % 3n === 2n).length, why).toBeGreaterThan(0);
    } finally {
      await Promise.all(knexes.map((k) => k.destroy()));
    }
  }, 90_000);
});
