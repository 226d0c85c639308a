/**
 * Issue 15: `idlease serve` while its database (a private PostgreSQL) is stopped and
 * restarted under load: /readyz goes red, requests fail with 503 DB_UNAVAILABLE within the
 * bound, and everything recovers by itself with no restart and no duplicate.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/index.js';
import { startPostgres, type ServerInstance } from '../helpers/servers.js';
import { startServe, type ServeProcess } from '../helpers/serve-process.js';
import { waitFor } from '../helpers/wait.js';

describe('idlease serve on PostgreSQL stopped and restarted under load', () => {
  let pg: ServerInstance | undefined;
  let server: ServeProcess | undefined;
  afterAll(async () => {
    await server?.stop();
    await pg?.destroy();
  });

  it('/readyz red while down, 503 DB_UNAVAILABLE within the bound, recovery without a restart', async () => {
    pg = await startPostgres();
    const knex = connect(pg.url, { poolMax: 1 });
    await migrate(knex);
    await addTag(knex, { tag: 'order', step: 20 });
    await knex.destroy();
    server = await startServe(pg.url, ['--max-step', '20']);
    const ids: bigint[] = [];
    const failures: Array<{ status: number; code: string; ms: number }> = [];
    let stop = false;
    const clients = Array.from({ length: 4 }, async () => {
      while (!stop) {
        const t0 = Date.now();
        const r = await fetch(`${server!.url}/api/segment/get/order`);
        const text = await r.text();
        if (r.status === 200) ids.push(BigInt(text));
        else {
          failures.push({ status: r.status, code: (JSON.parse(text) as { code: string }).code, ms: Date.now() - t0 });
          await new Promise((res) => setTimeout(res, 50));
        }
      }
    });
    await waitFor(() => ids.length > 0, { what: 'the clients to draw IDs through serve' });
    await pg.stop();
    // Memory runs dry within the first lease's worth of IDs, then calls wait out waitTimeoutMs.
    let red: number | undefined;
    for (let i = 0; i < 100 && red === undefined; i++) {
      const r = await fetch(`${server.url}/readyz`);
      if (r.status === 503) red = r.status;
      else await new Promise((res) => setTimeout(res, 200));
    }
    expect(red).toBe(503);
    // Every client's call waits out waitTimeoutMs (5 s) and fails; the bound is checked on each.
    await waitFor(() => failures.length >= 4, {
      timeoutMs: 15_000,
      what: () => `a failed call from each of the 4 clients (${failures.length} so far)`,
    });
    expect(failures.length, server.stderr().slice(-3000)).toBeGreaterThan(0);
    for (const f of failures) {
      expect(f).toMatchObject({ status: 503, code: 'DB_UNAVAILABLE' });
      expect(f.ms).toBeLessThan(8_000); // waitTimeoutMs (5 s) plus scheduling
    }
    await pg.start();
    let green = false;
    for (let i = 0; i < 100 && !green; i++) {
      green = (await fetch(`${server.url}/readyz`)).status === 200;
      if (!green) await new Promise((res) => setTimeout(res, 200));
    }
    expect(green).toBe(true);
    const countAfterRestart = ids.length;
    await waitFor(() => ids.length > countAfterRestart, { what: 'an ID drawn after the restart' });
    stop = true;
    await Promise.all(clients);
    expect(ids.length).toBeGreaterThan(countAfterRestart);
    expect(new Set(ids).size).toBe(ids.length);
    expect(await server.stop()).toBe(0);
  }, 90_000);
});
