/**
 * Issue 12: next_id() stays unique and never moves backwards through pg_terminate_backend and
 * a server crash mid-load (the postmaster SIGKILLed, as pg_ctl stop -m immediate does, then
 * restarted). IDs are recorded client-side, so what counts is what clients were given.
 * Private instance (it is killed). Wall time ~15 s.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';
import { migrate } from '../../src/migrations/migrate.js';
import { connect } from '../../src/connect.js';
import { toBigInt } from '../../src/ids.js';
import { sleep } from '../helpers/wait.js';

let pg: PostgresInstance;
beforeAll(async () => {
  pg = await startPostgres();
}, 60_000);
afterAll(async () => {
  await pg?.destroy();
});

/** n clients drawing flat out for ms; each keeps the IDs it was given, in order. Errors (the crash, a terminated backend) are counted, not thrown. */
async function draw(n: number, ms: number, each?: (i: number) => Promise<void>): Promise<{ ids: bigint[][]; errors: number }> {
  const clients: Knex[] = Array.from({ length: n }, () => connect(pg.url, { poolMax: 1 }));
  const ids: bigint[][] = clients.map(() => []);
  let errors = 0;
  const end = Date.now() + ms;
  try {
    await Promise.all(
      clients.map(async (k, i) => {
        while (Date.now() < end) {
          try {
            const res = await k.raw('SELECT nc.next_id() AS id FROM generate_series(1, 5)');
            for (const r of res.rows as Array<{ id: string }>) ids[i]!.push(toBigInt(r.id));
            if (each) await each(i);
          } catch {
            errors++;
            await sleep(20);
          }
        }
      }),
    );
  } finally {
    await Promise.all(clients.map((k) => k.destroy()));
  }
  return { ids, errors };
}

function check(runs: bigint[][][]): void {
  const all = runs.flat(2);
  expect(new Set(all).size).toBe(all.length);
  for (const run of runs) for (const list of run) for (let j = 1; j < list.length; j++) expect(list[j]! > list[j - 1]!).toBe(true);
  // Later runs only above earlier ones: the sequence never moved backwards.
  for (let r = 1; r < runs.length; r++) {
    const before = runs
      .slice(0, r)
      .flat(2)
      .reduce((a, b) => (b > a ? b : a), 0n);
    for (const id of runs[r]!.flat()) expect(id > before).toBe(true);
  }
  for (const id of all) expect(id > 0n).toBe(true);
}

describe('next_id() through terminated backends and a server crash (issue 12)', () => {
  it('stays unique and never moves backwards', { timeout: 120_000 }, async () => {
    const admin = connect(pg.url, { poolMax: 1 });
    await migrate(admin, { segments: false, nextId: { schema: 'nc', shard: 1 } });
    // pg_terminate_backend at random while 4 clients draw.
    let terminated = 0;
    const stop = Date.now() + 3_000;
    const killer = (async () => {
      while (Date.now() < stop) {
        await sleep(150);
        const res = await admin.raw(`SELECT count(pg_catalog.pg_terminate_backend(pid))::int AS n FROM pg_catalog.pg_stat_activity
          WHERE pid <> pg_catalog.pg_backend_pid() AND backend_type = 'client backend' AND random() < 0.5`);
        terminated += res.rows[0].n;
      }
    })();
    const first = await draw(4, 3_000);
    await killer;
    await admin.destroy();
    expect(terminated).toBeGreaterThan(0);
    // The crash: clients draw while the postmaster is SIGKILLed, and after the restart.
    const during = draw(4, 4_000);
    await sleep(1_500);
    await pg.kill();
    await pg.start();
    const second = await during;
    expect(second.errors).toBeGreaterThan(0);
    const third = await draw(4, 1_000);
    check([first.ids, second.ids, third.ids]);
    expect(third.ids.flat().length).toBeGreaterThan(0);
  });
});
