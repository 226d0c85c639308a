/**
 * Issue 16: the ticket allocator given the pools an app already has (mysql2 callback and promise
 * pools, pg.Pool, postgres.js) instead of knex. Two ticket "servers" are two databases on the
 * running server (increment 2, offsets 1 and 2). The pools are left as users leave them: a
 * default mysql2 pool reads BIGINT as a rounded number, so IDs are pushed past 2^53 to show
 * they come back exact. And the app's own pooled sessions must not pick up the ticket pair.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import mysql from 'mysql2';
import mysqlPromise from 'mysql2/promise';
import pg from 'pg';
import postgres from 'postgres';
import { migrate } from '../../src/migrations/migrate.js';
import { ticketObjectName } from '../../src/dialects/tickets.js';
import { createTicketAllocator, type TicketAllocator } from '../../src/ticket/index.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

const ABOVE_2_53 = 2n ** 53n + 1000n;

async function drawMany(alloc: TicketAllocator, callers: number, each: number): Promise<bigint[]> {
  const ids: bigint[] = [];
  await Promise.all(
    Array.from({ length: callers }, async () => {
      for (let i = 0; i < each; i++) ids.push(await alloc.next());
    }),
  );
  return ids;
}

function expectTickets(ids: bigint[]): void {
  expect(new Set(ids).size).toBe(ids.length);
  expect(ids.every((id) => typeof id === 'bigint' && id > ABOVE_2_53)).toBe(true);
  // Both residues served (round-robin), and nothing else.
  expect(new Set(ids.map((id) => id % 2n))).toEqual(new Set([0n, 1n]));
}

describe('ticket allocator from a mysql2 pool (MariaDB)', () => {
  const dbs: TestDb[] = [];
  beforeAll(async () => {
    for (const offset of [1, 2]) {
      const db = await createTestDb('mysql', `tkpool${offset}`);
      dbs.push(db);
      await migrate(db.knex, { segments: false, tickets: { increment: 2, offset } });
      await db.knex.raw(`ALTER TABLE ${ticketObjectName('default')} AUTO_INCREMENT = ${ABOVE_2_53 + BigInt(offset)}`);
    }
  });
  afterAll(async () => {
    await Promise.all(dbs.map((d) => d.drop()));
  });

  const poolsFor = (kind: 'callback' | 'promise') =>
    dbs.map((d) => {
      const u = new URL(d.url);
      const config = {
        host: u.hostname,
        port: Number(u.port || 3306),
        user: decodeURIComponent(u.username) || 'root',
        password: decodeURIComponent(u.password),
        database: u.pathname.slice(1),
        connectionLimit: 4,
      };
      return kind === 'callback' ? mysql.createPool(config) : mysqlPromise.createPool(config);
    });

  for (const kind of ['callback', 'promise'] as const) {
    it(`${kind} pools with default options: exact IDs past 2^53, no duplicate, and the app's sessions keep their own auto_increment pair`, async () => {
      const pools = poolsFor(kind);
      try {
        const alloc = createTicketAllocator({
          servers: [
            { pool: pools[0], offset: 1 },
            { pool: pools[1], offset: 2 },
          ],
        });
        const ids = await drawMany(alloc, 8, 150);
        await alloc.close();
        expectTickets(ids);
        // The pair is set on idlease's own sessions only: the app's pooled connections keep 1/1.
        const promised = pools.map((p) => ('promise' in p && typeof p.promise === 'function' ? p.promise() : p) as mysqlPromise.Pool);
        for (const p of promised) {
          const conns = await Promise.all([p.getConnection(), p.getConnection()]);
          for (const c of conns) {
            const [rows] = await c.query('SELECT @@session.auto_increment_increment AS inc, @@session.auto_increment_offset AS off');
            expect((rows as Array<{ inc: number; off: number }>)[0]).toMatchObject({ inc: 1, off: 1 });
            c.release();
          }
        }
      } finally {
        await Promise.all(
          pools.map((p) =>
            kind === 'promise' ? (p as mysqlPromise.Pool).end() : new Promise<void>((r) => (p as mysql.Pool).end(() => r())),
          ),
        );
      }
    });
  }

  it('a pool that is not one, or both knex and pool, is BAD_CONFIG naming what is accepted', () => {
    expect(() => createTicketAllocator({ servers: [{ pool: { query() {} }, offset: 1 }] })).toThrow(
      expect.objectContaining({ code: 'BAD_CONFIG', message: expect.stringMatching(/mysql2 pool/) }),
    );
    expect(() => createTicketAllocator({ servers: [{ pool: {}, knex: dbs[0]!.knex, offset: 1 }] })).toThrow(
      expect.objectContaining({ code: 'BAD_CONFIG', message: expect.stringMatching(/both knex and pool/) }),
    );
    expect(() => createTicketAllocator({ servers: [{ offset: 1 }] })).toThrow(
      expect.objectContaining({ code: 'BAD_CONFIG', message: expect.stringMatching(/servers\[0\]\.pool/) }),
    );
  });
});

describe('ticket allocator from PostgreSQL pools (pg.Pool, postgres.js)', () => {
  const dbs: TestDb[] = [];
  beforeAll(async () => {
    for (const offset of [1, 2]) {
      const db = await createTestDb('postgres', `tkpool${offset}`);
      dbs.push(db);
      await migrate(db.knex, { segments: false, tickets: { increment: 2, offset } });
    }
  });
  afterAll(async () => {
    await Promise.all(dbs.map((d) => d.drop()));
  });

  async function pushPast253(): Promise<void> {
    // The sequence behind the tickets: find it rather than assume its name.
    for (const [i, d] of dbs.entries()) {
      const r = await d.knex.raw(`SELECT schemaname || '.' || sequencename AS seq FROM pg_sequences WHERE sequencename LIKE ?`, [
        `${ticketObjectName('default')}%`,
      ]);
      expect(r.rows).toHaveLength(1);
      await d.knex.raw(`SELECT setval(?::regclass, ?)`, [r.rows[0].seq, String(ABOVE_2_53 + BigInt(i + 1) + 2n)]);
    }
  }

  it('pg.Pool whose int8 parser is parseInt: exact IDs past 2^53, no duplicate', async () => {
    await pushPast253();
    const rounding = { getTypeParser: (oid: number) => (oid === 20 ? (v: string) => parseInt(v, 10) : (v: string) => v) };
    const pools = dbs.map((d) => new pg.Pool({ connectionString: d.url, max: 4, types: rounding }));
    try {
      // The pool rounds int8 for the app's own queries: shown, so the test means something.
      const r = await pools[0]!.query(`SELECT (2^53 + 1)::int8 AS x`);
      expect(Number.isSafeInteger(r.rows[0].x)).toBe(false);
      const alloc = createTicketAllocator({
        servers: [
          { pool: pools[0], offset: 1 },
          { pool: pools[1], offset: 2 },
        ],
      });
      const ids = await drawMany(alloc, 8, 100);
      await alloc.close();
      expectTickets(ids);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
  });

  it('postgres.js: exact IDs past 2^53, no duplicate', async () => {
    await pushPast253();
    const sqls = dbs.map((d) => postgres(d.url, { max: 2 }));
    try {
      const alloc = createTicketAllocator({
        servers: [
          { pool: sqls[0], offset: 1 },
          { pool: sqls[1], offset: 2 },
        ],
      });
      const ids = await drawMany(alloc, 8, 100);
      await alloc.close();
      expectTickets(ids);
    } finally {
      await Promise.all(sqls.map((s) => s.end()));
    }
  });
});
