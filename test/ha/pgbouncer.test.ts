/**
 * Issue 13: segments and tickets behind pgbouncer in transaction pooling mode, where one
 * client's statements run on whichever server session is free. Neither keeps session state
 * on PostgreSQL (a lease is one statement, a ticket draw is one statement), so both must
 * keep every guarantee; migrate must work through it too. (next_id() under pgbouncer is
 * tested with the next_id() bound, test/integration/next-id-bound.test.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/index.js';
import { createTicketAllocator } from '../../src/ticket/index.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { startPgBouncer, type PgBouncerInstance } from '../helpers/pgbouncer.js';
import { startHaWorker, stopHaWorkers, tally } from '../helpers/ha-workers.js';
import { summary } from '../helpers/failover-scenario.js';

describe('segments and tickets through pgbouncer (transaction pooling) on PostgreSQL', () => {
  let db: TestDb;
  let bouncer: PgBouncerInstance;
  let viaBouncer: Knex;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'pgbouncer');
    bouncer = await startPgBouncer({ serverPort: Number(new URL(db.url).port), poolMode: 'transaction', poolSize: 4 });
    viaBouncer = connect(bouncer.via(db.url), { poolMax: 8 });
    await migrate(viaBouncer, { tickets: { increment: 3, offset: 2 } });
  });
  afterAll(async () => {
    await viaBouncer?.destroy();
    await bouncer?.stop();
    await db?.drop();
  });

  it('segments: 4 processes sharing 4 server connections, zero duplicates, each strictly increasing, no failed call', async () => {
    await addTag(viaBouncer, { tag: 'order', step: 50 });
    const dir = mkdtempSync(path.join(tmpdir(), 'idlease-pgbouncer-'));
    try {
      const workers = Array.from({ length: 4 }, (_, i) =>
        startHaWorker(`p${i}`, dir, { url: bouncer.via(db.url), tag: 'order', maxStep: 500 }),
      );
      await Promise.all(workers.map((w) => w.serving));
      await new Promise((r) => setTimeout(r, 3_000));
      stopHaWorkers(dir);
      const results = await Promise.all(workers.map((w) => w.done));
      const why = summary(results);
      const { total, duplicates, notIncreasing } = tally(results);
      expect(duplicates, why).toBe(0);
      expect(notIncreasing, why).toEqual([]);
      expect(
        results.every((r) => r.untyped === 0 && Object.keys(r.errors).length === 0 && r.leases > 1),
        why,
      ).toBe(true);
      expect(total).toBeGreaterThan(1_000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('tickets: two allocators, 16 callers at once, every ID unique and ≡ 2 (mod 3)', async () => {
    const a = createTicketAllocator({ servers: [{ knex: viaBouncer, offset: 2 }], increment: 3 });
    const second = connect(bouncer.via(db.url), { poolMax: 8 });
    const b = createTicketAllocator({ servers: [{ knex: second, offset: 2 }], increment: 3 });
    try {
      const ids = (
        await Promise.all(
          Array.from({ length: 16 }, async (_, i) => {
            const out: bigint[] = [];
            for (let k = 0; k < 100; k++) out.push(await (i % 2 ? a : b).next());
            return out;
          }),
        )
      ).flat();
      expect(new Set(ids).size).toBe(ids.length);
      expect(ids.every((id) => id % 3n === 2n)).toBe(true);
    } finally {
      await Promise.all([a.close(), b.close()]);
      await second.destroy();
    }
  });
});
