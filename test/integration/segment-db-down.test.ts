/**
 * The database goes away mid-run: IDs keep coming from memory, then DB_UNAVAILABLE within
 * the bound (cause attached), then recovery once the server is back — no duplicate across it.
 * Private servers (test/helpers/servers.ts) so stopping them disturbs nobody.
 */
import { afterAll, describe, expect, inject, it } from 'vitest';
import { startMariadb, startPostgres, type ServerInstance } from '../helpers/servers.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator, type SegmentEvent } from '../../src/segment/index.js';
import { isIdleaseError } from '../../src/errors.js';

const WAIT_MS = 1_500;

describe.each([
  ['mariadb', () => startMariadb()],
  ['postgres', () => startPostgres()],
] as const)('segment allocator with %s stopping mid-run', (_name, start) => {
  let server: ServerInstance | undefined;
  afterAll(async () => {
    await server?.destroy();
  });

  it('serves from memory, fails with DB_UNAVAILABLE within waitTimeoutMs, recovers after restart, never repeats', async () => {
    server = await start();
    const knex = connect(server.url, { poolMax: 2 });
    try {
      await migrate(knex);
      await addTag(knex, { tag: 'down', step: 1000 });
      const events: string[] = [];
      const alloc = createSegmentAllocator({
        knex,
        tag: 'down',
        minStep: 1000,
        maxStep: 1000,
        preloadMs: 10_000,
        waitTimeoutMs: WAIT_MS,
        retryMinMs: 20,
        retryMaxMs: 300,
        statementTimeoutMs: 2_000,
        onEvent: (e) => events.push(e.type),
      });
      const ids: bigint[] = [];
      for (let i = 0; i < 600; i++) ids.push(await alloc.next()); // past half: the preload starts
      // Let the preload finish: memory now holds the rest of this segment and the next one.
      for (let i = 0; i < 100 && alloc.stats().remaining <= 1000n; i++) await new Promise((r) => setTimeout(r, 20));
      expect(alloc.stats().remaining).toBeGreaterThan(1000n);

      await server.stop();
      let fromMemory = 0;
      let failure: unknown;
      let dryAt = 0;
      for (;;) {
        const t = Date.now();
        try {
          ids.push(await alloc.next());
          fromMemory++;
        } catch (err) {
          failure = err;
          dryAt = t;
          break;
        }
      }
      const waited = Date.now() - dryAt;
      expect(fromMemory).toBeGreaterThan(1000); // the current tail and the whole preloaded segment
      expect(isIdleaseError(failure, 'DB_UNAVAILABLE')).toBe(true);
      expect((failure as Error).cause).toBeDefined();
      expect((failure as Error).message).toMatch(/database is reachable/);
      expect(waited).toBeGreaterThanOrEqual(WAIT_MS - 50);
      expect(waited).toBeLessThan(WAIT_MS + 3_000); // bounded: the wait, not the driver's 60 s acquire timeout
      expect(alloc.stats().leaseErrors).toBeGreaterThan(0);
      expect(events).toContain('lease-error');

      await server.start();
      // Recovery needs no help: the background retry finds the server again.
      let recovered = false;
      for (let i = 0; i < 40 && !recovered; i++) {
        try {
          ids.push(...(await alloc.nextBatch(1500)));
          recovered = true;
        } catch (err) {
          if (!isIdleaseError(err, 'DB_UNAVAILABLE')) throw err;
        }
      }
      expect(recovered).toBe(true);
      await alloc.close();
      // A second process after the outage continues above everything.
      const again = createSegmentAllocator({ knex, tag: 'down' });
      ids.push(...(await again.nextBatch(10)));
      await again.close();
      expect(new Set(ids).size).toBe(ids.length);
      for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!).toBe(true);
    } finally {
      await knex.destroy();
    }
  }, 120_000);
});

describe.each(['mysql', 'postgres'] as const)('segment allocator with a misconfigured connection on %s', (flavor) => {
  const base = () => new URL(flavor === 'mysql' ? inject('mysqlUrl') : inject('pgUrl'));

  it('a wrong password or an unknown database is named as such, not as "unreachable", in the error and the event', async () => {
    const wrongUser = base();
    wrongUser.username = 'idlease_no_such_user';
    wrongUser.password = 'wrong';
    const noDb = base();
    noDb.pathname = '/idlease_no_such_database';
    for (const [url, want, problem] of [
      [wrongUser, /access denied/, 'access-denied'],
      [noDb, /unknown database/, 'unknown-database'],
    ] as const) {
      const knex = connect(url.toString(), { poolMax: 1 });
      const events: SegmentEvent[] = [];
      const a = createSegmentAllocator({
        knex,
        tag: 't',
        waitTimeoutMs: 1_500,
        retryMinMs: 50,
        retryMaxMs: 200,
        onEvent: (e) => events.push(e),
      });
      try {
        await expect(a.next()).rejects.toMatchObject({ code: 'DB_UNAVAILABLE', message: expect.stringMatching(want) });
        expect(events.find((e) => e.type === 'lease-error')).toMatchObject({ problem });
      } finally {
        await a.close();
        await knex.destroy();
      }
    }
  });
});
