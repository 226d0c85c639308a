/**
 * next_id() on PostgreSQL through two Patroni failovers in a row (issue 42): three nodes, writers
 * inserting into an attached column through HAProxy. The leader's walsenders are paused 2 s so the
 * replicas miss its last draws, then the leader node crashes; as soon as a write lands on the new
 * leader and its last replica streams from it, the same again — a second failover before anyone
 * acts. Nothing is run by anyone in between (no bump): a promoted standby's first draw finds the
 * counter behind the clock and moves to it, past every lost draw whose time field was earlier.
 * Every ID any writer was given: no repeat.
 */
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { attachNextId } from '../../src/next-id/attach.js';
import { checkStreams } from '../chaos/check.js';
import { startPatroniCluster, type PatroniCluster, type PatroniNode } from '../helpers/patroni.js';
import { sleep } from '../helpers/wait.js';

let cluster: PatroniCluster | undefined;
afterEach(async () => {
  await cluster?.stop();
  cluster = undefined;
});

/**
 * A writer: 20-row INSERT … RETURNING through HAProxy every 20 ms, reconnecting on any error. A
 * service's pace: Patroni promotes no replica that lags by more than maximum_lag_on_failover
 * (1 MB of WAL), and flat-out writers left the last replica further behind than that.
 */
function writer(url: string, w: number, stop: () => boolean) {
  const given: bigint[] = [];
  let errors = 0;
  const done = (async () => {
    while (!stop()) {
      const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
      c.on('error', () => undefined);
      try {
        await c.connect();
        while (!stop()) {
          const r = await c.query<{ id: string }>('INSERT INTO ids (w) SELECT $1 FROM generate_series(1, 20) RETURNING id::text AS id', [
            w,
          ]);
          for (const row of r.rows) given.push(BigInt(row.id));
          await sleep(20);
        }
      } catch {
        errors++;
        await sleep(50);
      } finally {
        await c.end().catch(() => undefined);
      }
    }
  })();
  return { given, done, errors: () => errors };
}

it('two leader crashes in a row, each losing 2 s of draws, nobody acting: 0 repeats', async () => {
  const c = (cluster = await startPatroniCluster());
  const knex = connect(c.url(), { poolMax: 1 });
  try {
    await migrate(knex, { segments: false, nextId: true });
    await knex.raw('CREATE TABLE ids (id bigint NOT NULL, w int NOT NULL)');
    await attachNextId(knex, { table: 'ids' });
  } finally {
    await knex.destroy();
  }
  let stopping = false;
  const writers = [1, 2, 3].map((w) => writer(c.url(), w, () => stopping));
  const total = () => writers.reduce((n, w) => n + w.given.length, 0);
  const progress = async (more: number, what: string) => {
    const want = total() + more;
    const end = Date.now() + 90_000;
    while (total() < want) {
      if (Date.now() > end) throw new Error(`${what}: fewer than ${more} IDs within 90 s`);
      await sleep(100);
    }
  };
  await progress(3_000, 'before the first failover');
  const crashed: PatroniNode[] = [];
  const log: string[] = [];
  for (const round of [1, 2]) {
    await c.waitForReplicas(round === 1 ? 2 : 1, 90_000);
    const leader = await c.waitForLeader();
    const resume = await c.pauseWalSenders();
    const lostFrom = total();
    await sleep(2_000);
    const lost = total() - lostFrom;
    crashed.push(await c.crashLeader()); // the paused walsenders die with it
    resume();
    const next = await c.waitForLeader({ exclude: crashed, timeoutMs: 90_000 });
    const t0 = Date.now();
    await c.waitForWriteThroughProxy(next, 90_000);
    await progress(1_000, `after failover ${round}`);
    log.push(`${leader.name} → ${next.name}: ~${lost} draws lost, writing again ${Date.now() - t0} ms after the proxy moved`);
  }
  stopping = true;
  await Promise.all(writers.map((w) => w.done));
  const all = writers.flatMap((w) => w.given);
  const { repeats } = checkStreams([{ space: 'ids', name: 'writers', ids: BigInt64Array.from(all), ordered: false }])[0]!;
  const why = `${all.length} IDs, ${repeats} repeats; ${log.join('; ')}`;
  console.log(`next_id() through two Patroni failovers: ${why}`);
  expect(repeats, why).toBe(0);
  expect(
    all.every((id) => id > 0n),
    why,
  ).toBe(true);
}, 300_000);
