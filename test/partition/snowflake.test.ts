/**
 * Snowflake allocators as OS processes, each in a network namespace of its own, reaching a
 * private PostgreSQL or MariaDB over a veth (test/helpers/partition.ts). One worker bit: two processes
 * hold ids 0 and 1, a third waits. The holder `a` is cut off silently (every packet dropped:
 * its renewal hangs on an open connection), then:
 *   - `a` stops issuing before its lease expires by the database's clock (the row's
 *     lease_expires_at, polled from this process over loopback), and its calls fail with
 *     DB_UNAVAILABLE within waitTimeoutMs;
 *   - the waiting process takes a's id once it has expired, and issues above all of a's IDs;
 *   - after the heal, a learns it lost the id, issues nothing more under it, waits for an id
 *     (NO_WORKER_ID) and takes the one `b` gives back when b stops: it recovers without restart;
 *   - every ID of every file counted: no duplicate, each process strictly increasing; no failure
 *     untyped; every process ends within its close bound after SIGTERM.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';
import { readIds } from '../helpers/ha-workers.js';
import { createPartitionNet, type Link, type PartitionNet } from '../helpers/partition.js';
import type { ServerInstance } from '../helpers/servers.js';
import { connect } from '../../src/connect.js';
import { decodeId } from '../../src/layout/index.js';
import { migrate } from '../../src/migrations/migrate.js';
import { PARTITION_LAYOUT } from './layout.js';
import { partitionServer } from './servers.js';
import { sleep } from '../helpers/wait.js';

const WORKER = path.join(REPO_ROOT, 'test/partition/snowflake-worker.ts');
const TTL = 2_000;
const WAIT = 1_000;
/**
 * How far a holder records its bound past its lease (bound = wall + ttl + maxLead): a holder
 * that ignored its fence would go on issuing this long after its lease expired.
 */
const MAX_LEAD = 500;
/**
 * How long a's link stays cut. TCP retransmits the renewal that hung at the cut 0.2, 0.6, 1.4,
 * 3, 6.2, 12.6 and 25.4 s after sending it (RTO from 200 ms, doubling): a heal at 16 s falls
 * ~10 s before the next one, so an allocator that waited for that statement would learn its
 * fate ~10 s after the heal. It must not depend on TCP: it gives up on the statement and asks again.
 */
const CUT_MS = 16_000;
/** After the heal, a knows it lost its id within this: one connect bound (1 s) + backoff + the claim, with room for load. */
const HEALED_WITHIN_MS = 3_000;
/** A failed call may end this much past waitTimeoutMs: timers on a loaded 2-core machine. */
const SLACK_MS = 500;
/** How long any awaited step may take before the test fails with the logs (worker start-up under load). */
const STEP_MS = 20_000;

interface Worker {
  readonly name: string;
  readonly link: Link;
  readonly child: ChildProcess;
  readonly out: string;
  log: string;
}

/** Each worker id's lease expiry by the database's clock, in Unix ms, per holder token. */
const EXPIRY_SQL = {
  postgres: `SELECT holder_token, round(extract(epoch FROM lease_expires_at) * 1000)::bigint::text AS exp FROM idlease.idlease_workers WHERE worker_group = 'partition' AND worker_id = ?`,
  mysql: `SELECT holder_token, CAST(ROUND(UNIX_TIMESTAMP(lease_expires_at) * 1000) AS CHAR) AS exp FROM idlease_workers WHERE worker_group = 'partition' AND worker_id = ?`,
};

/**
 * PostgreSQL holds the cut long enough to tell a given-up renewal from one waiting on TCP (see
 * CUT_MS); MariaDB, run for the same guarantees on the other worker-store SQL (a claim there is
 * an INSERT and then a read by token), a shorter cut, to keep the suite short.
 */
const CUT_BY_FLAVOR = { postgres: CUT_MS, mysql: 6_000 };

describe.each(['postgres', 'mysql'] as const)('snowflake holders behind a partitionable link (%s)', (flavor) => {
  let net: PartitionNet;
  let server: ServerInstance;
  let remoteUrl: string;
  let knex: Knex;
  let dir: string;
  const workers: Worker[] = [];

  beforeAll(async () => {
    net = createPartitionNet({ links: 3 });
    ({ server, remoteUrl } = await partitionServer(flavor, net));
    knex = connect(server.url, { poolMax: 2 });
    await migrate(knex, { segments: false, workers: true });
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-partition-'));
  });
  afterAll(async () => {
    net?.destroy();
    await knex?.destroy();
    await server?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const dump = () =>
    workers
      .map(
        (w) =>
          `--- ${w.name}\n${w.log
            .split('\n')
            .filter((l) => !l.startsWith('renewed'))
            .join('\n')}`,
      )
      .join('\n');

  function start(name: string, link: Link): Worker {
    const out = path.join(dir, `${name}.bin`);
    writeFileSync(out, '');
    const cfg = {
      url: remoteUrl,
      out,
      leaseTtlMs: TTL,
      maxLeadMs: MAX_LEAD,
      waitTimeoutMs: WAIT,
    };
    const child = link.spawn(process.execPath, [builtWorker(WORKER), JSON.stringify(cfg)], { cwd: REPO_ROOT });
    const w: Worker = { name, link, child, out, log: '' };
    child.stdout!.on('data', (d: Buffer) => (w.log += d));
    child.stderr!.on('data', (d: Buffer) => (w.log += d));
    workers.push(w);
    return w;
  }

  /** The first match of `re` in w's log after `from` characters; the index just past it. */
  async function seen(w: Worker, re: RegExp, from = 0): Promise<{ m: RegExpMatchArray; end: number; at: number }> {
    const until = Date.now() + STEP_MS;
    for (;;) {
      const m = w.log.slice(from).match(re);
      if (m) return { m, end: from + m.index! + m[0].length, at: Date.now() };
      if (w.child.exitCode !== null || Date.now() > until)
        throw new Error(`${w.name}: no ${re} (${w.child.exitCode === null ? `${STEP_MS} ms` : 'exited'})\n${dump()}`);
      await sleep(10);
    }
  }

  /** Every expiry the row of `workerId` carried for each holder token, read by the database's clock, until stop(). */
  function pollRow(workerId: number): { expiries: Map<string, number>; stop: () => Promise<void> } {
    const expiries = new Map<string, number>();
    let stopped = false;
    const done = (async () => {
      while (!stopped) {
        const r = await knex.raw(EXPIRY_SQL[flavor], [workerId]);
        // pg answers { rows }, mysql2 [rows, fields].
        for (const row of (flavor === 'mysql' ? r[0] : r.rows) as { holder_token: string; exp: string }[])
          expiries.set(row.holder_token, Math.max(Number(row.exp), expiries.get(row.holder_token) ?? 0));
        await sleep(20);
      }
    })();
    return {
      expiries,
      stop: async () => {
        stopped = true;
        await done;
      },
    };
  }

  it('a holder cut off stops before its lease expires, its id is taken over, it recovers after the heal: 0 duplicates', async () => {
    const all = ['p0', 'p1', 'p2'].map((n, i) => start(n, net.links[i]!));
    // Two claim ids 0 and 1; the third finds both held and waits.
    const firstClaims = await Promise.all(
      all.map(async (w) => {
        const claim = seen(w, /claimed (\d)/).then((s) => Number(s.m[1]));
        const waiting = seen(w, /fail NO_WORKER_ID/).then(() => -1);
        return Promise.race([claim, waiting]);
      }),
    );
    const holders = all.filter((_, i) => firstClaims[i]! >= 0);
    expect(holders.length, dump()).toBe(2);
    const waiter = all.find((_, i) => firstClaims[i]! < 0)!;
    const a = holders[0]!;
    const b = holders[1]!;
    const aId = firstClaims[all.indexOf(a)]!;
    const bId = firstClaims[all.indexOf(b)]!;
    await Promise.all(holders.map((w) => seen(w, /serving/)));
    const row = pollRow(aId);
    await sleep(1_000);

    const logAtCut = a.log.length;
    const cutAt = Date.now();
    a.link.cut();
    // a's fence runs out (≤ ttl − margin after its last renewal), its calls fail; the waiter
    // claims a's id once it has expired by the database's clock.
    const aFails = await seen(a, /fail (\w+) (\d+)/, logAtCut);
    expect(aFails.m[1], dump()).toBe('DB_UNAVAILABLE');
    const takeover = await seen(waiter, new RegExp(`claimed ${aId}`));
    await seen(waiter, /serving/, takeover.end);
    await sleep(cutAt + CUT_BY_FLAVOR[flavor] - Date.now());
    const logAtHeal = a.log.length;
    const healAt = Date.now();
    a.link.heal();

    // The renewal that hung through the cut comes back (TCP retransmits it) and finds the token gone.
    const lost = await seen(a, new RegExp(`lost ${aId}`), logAtHeal);
    expect(lost.at - healAt, dump()).toBeLessThan(HEALED_WITHIN_MS);
    await seen(a, /fail NO_WORKER_ID/, lost.end);
    const logAtRelease = a.log.length;
    b.child.kill('SIGTERM');
    const reclaim = await seen(a, new RegExp(`claimed ${bId}`), logAtRelease);
    await seen(a, /serving/, reclaim.end);
    await sleep(300);
    await row.stop();

    const stopAt = Date.now();
    for (const w of all) w.child.kill('SIGTERM');
    const summaries = await Promise.all(
      all.map((w) =>
        seen(w, /\{"ids".*\}/).then((s) => JSON.parse(s.m[0]) as { ids: number; untyped: number; closeMs: number; destroyMs: number }),
      ),
    );
    await Promise.all(all.map((w) => new Promise((r) => (w.child.exitCode !== null ? r(null) : w.child.once('exit', r)))));
    const endedMs = Date.now() - stopAt;

    // Every ID counted: no duplicate across the files, each file strictly increasing.
    const files = all.map((w) => ({ w, ids: [...readIds(w.out)] }));
    const everything = new Set<bigint>();
    let total = 0;
    for (const { w, ids } of files) {
      for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!, `${w.name} not increasing at ${i}`).toBe(true);
      for (const id of ids) everything.add(id);
      total += ids.length;
    }
    expect(total - everything.size, 'duplicates').toBe(0);
    expect(summaries.map((s) => s.ids)).toEqual(files.map((f) => f.ids.length));

    // a's last ID under its lost lease was issued before that lease expired by the database's
    // clock: the last expiry the row showed for a's token (same host, so one clock). A time field
    // is never below the wall time it was issued at, so this bounds the issue time from above.
    const lastUnitEnd = (ids: bigint[]) =>
      Math.max(...ids.map((id) => decodeId(id, PARTITION_LAYOUT).unixMs)) + PARTITION_LAYOUT.timeUnitMs;
    const aOnLost = files[all.indexOf(a)]!.ids.filter((id) => decodeId(id, PARTITION_LAYOUT).shard === aId);
    const waiterOnTaken = files[all.indexOf(waiter)]!.ids.filter((id) => decodeId(id, PARTITION_LAYOUT).shard === aId);
    // The first token the poll saw on the row is a's (it held the id before the poll started).
    const aExpiry = [...row.expiries.values()][0];
    expect(aExpiry, "a's lease seen in the row").toBeDefined();
    const aLastEnd = lastUnitEnd(aOnLost);
    expect(aLastEnd, `a issued until ${aLastEnd}, its lease expired at ${aExpiry}`).toBeLessThan(aExpiry!);
    // After the takeover and the heal, nothing of a's under that id: the new holder is above all of it.
    const aMax = aOnLost.reduce((m, id) => (id > m ? id : m), 0n);
    expect(waiterOnTaken.every((id) => id > aMax)).toBe(true);
    expect(aOnLost.length).toBeGreaterThan(0);
    expect(waiterOnTaken.length).toBeGreaterThan(0);

    // Every failure typed and within waitTimeoutMs (+ timer slack); a failed only with
    // DB_UNAVAILABLE while cut and NO_WORKER_ID while every id was held.
    const fails = all.flatMap((w) => [...w.log.matchAll(/fail (\w+) (\d+)/g)].map((m) => ({ w: w.name, code: m[1]!, ms: Number(m[2]) })));
    expect(
      summaries.every((s) => s.untyped === 0),
      dump(),
    ).toBe(true);
    expect(
      fails.filter((f) => f.ms > WAIT + SLACK_MS),
      dump(),
    ).toEqual([]);
    expect(new Set(fails.filter((f) => f.w === a.name).map((f) => f.code))).toEqual(new Set(['DB_UNAVAILABLE', 'NO_WORKER_ID']));
    expect(fails.filter((f) => f.w !== a.name && f.code !== 'NO_WORKER_ID')).toEqual([]);
    // No allocator hung: each closed within closeTimeoutMs (5 s) of SIGTERM; every process exited (waited for above).
    expect(Math.max(...summaries.map((s) => s.closeMs))).toBeLessThan(5_000);

    console.log(
      JSON.stringify({
        ids: total,
        duplicates: total - everything.size,
        aStoppedBeforeExpiryMs: aExpiry! - aLastEnd,
        aLastIdAfterCutMs: aLastEnd - cutAt,
        aFirstFailAfterCutMs: aFails.at - cutAt,
        takeoverAfterCutMs: takeover.at - cutAt,
        cutMs: healAt - cutAt,
        lostAfterHealMs: lost.at - healAt,
        aServingAgainAfterHealMs: reclaim.at - healAt,
        failedCalls: fails.length,
        maxFailMs: Math.max(...fails.map((f) => f.ms)),
        endedMs,
        closeMs: summaries.map((s) => s.closeMs),
        knexDestroyMs: summaries.map((s) => s.destroyMs),
      }),
    );
  }, 90_000); // a 16 s cut, start-up of three workers under load, and a bounded wait per step
});
