/**
 * 12 concurrent callers on one InnoDB ticket table: REPLACE INTO raises ER_LOCK_DEADLOCK
 * under this load (measured: 15 of 3,000 calls at 8 connections). None may reach a caller,
 * and no ID may repeat. The raw loop beside it shows the deadlocks are real on this server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createTicketAllocator } from '../../src/ticket/index.js';

const CALLERS = 12;
const EACH = 200;

describe('InnoDB ticket table under 12 concurrent callers', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('mysql', 'tick_innodb');
    await migrate(db.knex, { segments: false, tickets: { engine: 'InnoDB' } });
  });
  afterAll(async () => {
    await db.drop();
  });

  it('no deadlock or lock-wait error reaches a caller; every ID unique', async () => {
    const alloc = createTicketAllocator({ servers: [{ knex: db.knex, offset: 1 }], connectionsPerServer: CALLERS, timeoutMs: 30_000 });
    try {
      const ids: bigint[] = [];
      const failures: unknown[] = [];
      // Adversary: 8 plain REPLACE loops on the same table from another pool, the load that
      // deadlocked in the measurement. Its own deadlocks are counted, not hidden.
      const noise = db.another();
      let stop = false;
      let noiseDeadlocks = 0;
      const adversary = Array.from({ length: 8 }, async () => {
        while (!stop) {
          await noise.raw("REPLACE INTO idlease_tickets_default (stub) VALUES ('a')").catch((e: { errno?: number }) => {
            if (e.errno === 1213 || e.errno === 1205 || e.errno === 1467) noiseDeadlocks++;
            else throw e;
          });
        }
      });
      await Promise.all(
        Array.from({ length: CALLERS }, async () => {
          for (let i = 0; i < EACH; i++)
            await alloc.next().then(
              (id) => ids.push(id),
              (e: unknown) => failures.push(e),
            );
        }),
      );
      stop = true;
      await Promise.all(adversary);
      console.log(`adversary REPLACE loop met ${noiseDeadlocks} deadlocks / lock-wait failures`);
      expect(failures).toEqual([]);
      expect(ids.length).toBe(CALLERS * EACH);
      expect(new Set(ids.map(String)).size).toBe(ids.length);
      const [st] = await alloc.status();
      expect(st!.server?.engine).toBe('InnoDB');
      expect(st!.health).toBe('up');
      // How many conflicts this load meets varies (1–176 seen); the next test forces one
      // deterministically, so the retry path is proven there, not by luck here.
      // Reported so a run shows whether this load met deadlocks (they vary run to run).
      console.log(`InnoDB, ${CALLERS} callers × ${EACH}: ${st!.lockConflicts} deadlocks/lock waits retried, none surfaced`);
    } finally {
      await alloc.close();
    }
  });

  it('a row lock held elsewhere ends as a lock-wait error, is retried, and the caller gets an ID', async () => {
    const alloc = createTicketAllocator({ servers: [{ knex: db.knex, offset: 1 }], statementTimeoutMs: 2000, timeoutMs: 20_000 });
    const holder = db.another();
    try {
      await alloc.next();
      const trx = await holder.transaction();
      await trx.raw("SELECT * FROM idlease_ticket_schemes WHERE sequence_name = 'default' FOR UPDATE");
      const pending = Promise.all([alloc.next(), alloc.next()]);
      await new Promise((r) => setTimeout(r, 2500)); // past innodb_lock_wait_timeout (1 s)
      await trx.commit();
      const ids = await pending;
      expect(new Set(ids.map(String)).size).toBe(2);
      const [st] = await alloc.status();
      expect(st!.lockConflicts).toBeGreaterThan(0);
      expect(st!.health).toBe('up');
      expect(st!.failures).toBe(0);
    } finally {
      await alloc.close();
    }
  });
});
