/**
 * A server that answers but takes no writes — a hot standby, a demoted primary a router or a stale
 * name still points at — on MariaDB and PostgreSQL. Every new connection of the pool is made
 * read-only while `readOnly` is set (MariaDB `SET SESSION TRANSACTION READ ONLY` → 1792, PostgreSQL
 * `default_transaction_read_only` → 25006): what a pool reaching a standby gets, without taking the
 * shared server read-only for every other test file.
 *
 * What must hold: every error is typed (DB_UNAVAILABLE saying the server is read-only, never
 * INTERNAL), the allocator keeps retrying, and once the router would point at a primary again the
 * pool's connections to the read-only server are not reused: leases succeed again by themselves.
 */
import knexFactory from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { knexConfig } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator } from '../../src/segment/index.js';
import type { SegmentEvent } from '../../src/segment/types.js';
import { classifyDriverError } from '../../src/dialects/driver-errors.js';

describe.each(['mysql', 'postgres'] as const)('a read-only server on %s', (flavor) => {
  let db: TestDb;
  let readOnly = false;
  let handle: ReturnType<typeof knexFactory>;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'readonly');
    await migrate(db.knex);
    await addTag(db.knex, { tag: 'order', step: 10 });
    const config = knexConfig(db.url, { poolMax: 3 });
    handle = knexFactory({
      ...config,
      pool: {
        ...(config.pool ?? {}),
        afterCreate(conn: unknown, done: (err: Error | null, conn: unknown) => void) {
          if (!readOnly) return done(null, conn);
          const sql = flavor === 'mysql' ? 'SET SESSION TRANSACTION READ ONLY' : 'SET default_transaction_read_only = on';
          const c = conn as { query(sql: string, cb: (err: Error | null) => void): void };
          c.query(sql, (err) => done(err, conn));
        },
      },
    });
  });
  afterAll(async () => {
    await handle?.destroy();
    await db?.drop();
  });

  it('leases fail typed while it is read-only, and recover by themselves once the pool reaches a primary', async () => {
    readOnly = true;
    const events: SegmentEvent[] = [];
    const alloc = createSegmentAllocator({ knex: handle, tag: 'order', waitTimeoutMs: 1500, onEvent: (e) => events.push(e) });
    try {
      const err = await alloc.next().catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'DB_UNAVAILABLE' });
      expect(String((err as Error).message)).toMatch(/read-only/);
      const failures = events.filter((e): e is Extract<SegmentEvent, { type: 'lease-error' }> => e.type === 'lease-error');
      expect(failures.length).toBeGreaterThan(0);
      expect(failures.every((e) => e.problem === 'not-primary')).toBe(true);
      expect(classifyDriverError(failures[0]!.error)).toBe('read-only');
      // The tag admin, one statement, no retry: typed as well.
      await expect(addTag(handle, { tag: 'other' })).rejects.toMatchObject({ code: 'DB_UNAVAILABLE', message: /read-only/ });

      readOnly = false;
      // The allocator is still retrying on its own backoff: the next call gets IDs without any step of ours.
      let id: bigint | undefined;
      for (let i = 0; i < 20 && id === undefined; i++) id = await alloc.next().catch(() => undefined);
      expect(id).toBe(1n);
      expect(alloc.stats().lastError).toBeUndefined();
    } finally {
      readOnly = false;
      await alloc.close();
    }
  });
});
