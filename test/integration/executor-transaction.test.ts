/**
 * `SqlExecutor.transaction` on every client idlease runs on: commit is seen by others,
 * a throw rolls back and rethrows, and a pool gets its connection back either way (more
 * transactions than the pool has connections, one of them failing, all finish).
 */
import { PGlite } from '@electric-sql/pglite';
import mysql from 'mysql2';
import mysqlPromise from 'mysql2/promise';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SqlExecutor } from '../../src/dialects/sql.js';
import { knexExecutor, poolExecutor } from '../../src/drivers/index.js';
import { pgliteExecutor } from '../../src/drivers/pglite.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

interface Client {
  readonly name: string;
  readonly flavor: 'mysql' | 'postgres' | 'pglite';
  open(db: TestDb | undefined): Promise<{ exec: SqlExecutor; end(): Promise<unknown> }>;
}

const CLIENTS: Client[] = [
  { name: 'knex (mysql2)', flavor: 'mysql', open: async (db) => ({ exec: knexExecutor(db!.knex), end: async () => {} }) },
  { name: 'knex (pg)', flavor: 'postgres', open: async (db) => ({ exec: knexExecutor(db!.knex), end: async () => {} }) },
  { name: 'knex (PGlite)', flavor: 'pglite', open: async (db) => ({ exec: knexExecutor(db!.knex), end: async () => {} }) },
  {
    name: 'pg.Pool',
    flavor: 'postgres',
    open: async (db) => {
      const p = new pg.Pool({ connectionString: db!.url, max: 2 });
      return { exec: poolExecutor(p), end: () => p.end() };
    },
  },
  {
    name: 'pg.Client',
    flavor: 'postgres',
    open: async (db) => {
      const c = new pg.Client({ connectionString: db!.url });
      await c.connect();
      return { exec: poolExecutor(c), end: () => c.end() };
    },
  },
  {
    name: 'mysql2 pool',
    flavor: 'mysql',
    open: async (db) => {
      const p = mysql.createPool({ uri: db!.url, connectionLimit: 2 });
      return { exec: poolExecutor(p), end: () => new Promise((r) => p.end(r)) };
    },
  },
  {
    name: 'mysql2/promise connection',
    flavor: 'mysql',
    open: async (db) => {
      const c = await mysqlPromise.createConnection({ uri: db!.url });
      return { exec: poolExecutor(c), end: () => c.end() };
    },
  },
  {
    name: 'postgres.js',
    flavor: 'postgres',
    open: async (db) => {
      const sql = postgres(db!.url, { max: 2 });
      return { exec: poolExecutor(sql), end: () => sql.end() };
    },
  },
  {
    name: 'PGlite',
    flavor: 'pglite',
    open: async () => {
      const p = await PGlite.create();
      return { exec: pgliteExecutor(p), end: () => p.close() };
    },
  },
];

const dbs = new Map<string, TestDb>();
beforeAll(async () => {
  for (const f of ['mysql', 'postgres', 'pglite'] as const) dbs.set(f, await createTestDb(f, 'txn'));
});
afterAll(async () => {
  for (const db of dbs.values()) await db.drop();
});

describe.each(CLIENTS)('SqlExecutor.transaction on $name', (client) => {
  it('commits, rolls back on a throw, and gives pooled connections back', async () => {
    const { exec, end } = await client.open(dbs.get(client.flavor));
    const table = `txn_${client.name.replace(/[^a-z0-9]/gi, '_').toLowerCase()}`;
    try {
      await exec.run(`CREATE TABLE ${table} (v int)`, []);
      await exec.transaction(async (tx) => {
        await tx.run(`INSERT INTO ${table} (v) VALUES (?)`, [1]);
        // Flat: a nested call joins the same transaction.
        await tx.transaction((inner) => inner.run(`INSERT INTO ${table} (v) VALUES (?)`, [2]));
      });
      const boom = new Error('boom');
      await expect(
        exec.transaction(async (tx) => {
          await tx.run(`INSERT INTO ${table} (v) VALUES (?)`, [3]);
          throw boom;
        }),
      ).rejects.toBe(boom);
      // A driver error inside rolls back too, and the connection is usable again.
      await expect(
        exec.transaction(async (tx) => {
          await tx.run(`INSERT INTO ${table} (v) VALUES (?)`, [4]);
          await tx.run('SELECT * FROM no_such_table_here', []);
        }),
      ).rejects.toThrow(/no_such_table_here/);
      // More transactions at once than a pool holds connections: none is kept.
      await Promise.all(
        Array.from({ length: 6 }, (_, i) => exec.transaction((tx) => tx.run(`INSERT INTO ${table} (v) VALUES (?)`, [10 + i]))),
      );
      const { rows } = await exec.run(`SELECT v FROM ${table} ORDER BY v`, []);
      expect(rows.map((r) => Number(r[0]))).toEqual([1, 2, 10, 11, 12, 13, 14, 15]);
    } finally {
      await exec.run(`DROP TABLE IF EXISTS ${table}`, []).catch(() => undefined);
      await end();
    }
  });
});
