/**
 * A child process that draws tickets from pools alone (pg.Pool, mysql2 callback or promise pool),
 * run under forbid-knex.mjs: several allocators at once, all from src/ticket, then on MySQL the
 * app's own pool connections are read back (session pair, and an AUTO_INCREMENT insert of the app's).
 * Prints one JSON line: { ids, appSessions, appInsertIds }.
 *   node --import forbid-knex.mjs --import tsx test/helpers/ticket-pools-alone.ts '<json config>'
 */
import mysql from 'mysql2';
import mysqlPromise from 'mysql2/promise';
import pg from 'pg';
import { createTicketAllocator } from '../../src/ticket/index.js';

interface Config {
  kind: 'pg' | 'mysql2' | 'mysql2/promise';
  urls: string[];
  increment: number;
  allocators: number;
  callers: number;
  each: number;
  /** Positive control: import knex, which the hook must refuse. */
  loadKnex?: boolean;
}

const cfg = JSON.parse(process.argv[2]!) as Config;
if (cfg.loadKnex) await import('knex');

const POOL_SIZE = 3;

function mysqlConfig(url: string) {
  const u = new URL(url);
  return {
    host: u.hostname,
    port: Number(u.port || 3306),
    user: decodeURIComponent(u.username) || 'root',
    password: decodeURIComponent(u.password),
    database: u.pathname.slice(1),
    connectionLimit: POOL_SIZE,
  };
}

const pools = cfg.urls.map((url) => {
  if (cfg.kind === 'pg') return new pg.Pool({ connectionString: url, max: POOL_SIZE });
  return cfg.kind === 'mysql2' ? mysql.createPool(mysqlConfig(url)) : mysqlPromise.createPool(mysqlConfig(url));
});
/** The promise face of each pool, for the app's own queries below. */
const appPools = cfg.kind === 'mysql2' ? (pools as mysql.Pool[]).map((p) => p.promise()) : (pools as mysqlPromise.Pool[]);

if (cfg.kind !== 'pg') {
  // The app uses its pools before and while tickets are drawn, as apps do.
  await Promise.all(
    appPools.map((p) => p.query('CREATE TABLE IF NOT EXISTS app_rows (id int NOT NULL AUTO_INCREMENT PRIMARY KEY, v int NOT NULL)')),
  );
}

const allocators = Array.from({ length: cfg.allocators }, () =>
  createTicketAllocator({ servers: pools.map((pool, i) => ({ pool, offset: i + 1 })), increment: cfg.increment, connectionsPerServer: 4 }),
);
const ids: bigint[] = [];
await Promise.all(
  allocators.flatMap((alloc) =>
    Array.from({ length: cfg.callers }, async () => {
      for (let i = 0; i < cfg.each; i++) ids.push(await alloc.next());
    }),
  ),
);
await Promise.all(allocators.map((a) => a.close()));

const appSessions: Array<{ inc: number; off: number }> = [];
const appInsertIds: number[] = [];
if (cfg.kind !== 'pg') {
  for (const p of appPools) {
    // Every connection the pool has, held at once.
    const conns = await Promise.all(Array.from({ length: POOL_SIZE }, () => p.getConnection()));
    for (const c of conns) {
      const [rows] = await c.query('SELECT @@session.auto_increment_increment AS inc, @@session.auto_increment_offset AS off');
      appSessions.push(...(rows as Array<{ inc: number; off: number }>).map((r) => ({ inc: Number(r.inc), off: Number(r.off) })));
      const [res] = await c.query('INSERT INTO app_rows (v) VALUES (1)');
      appInsertIds.push((res as { insertId: number }).insertId);
      c.release();
    }
  }
}
await Promise.all(
  pools.map((p) =>
    p instanceof pg.Pool
      ? p.end()
      : cfg.kind === 'mysql2'
        ? new Promise<void>((r) => (p as mysql.Pool).end(() => r()))
        : (p as mysqlPromise.Pool).end(),
  ),
);
process.stdout.write(JSON.stringify({ ids: ids.map(String), appSessions, appInsertIds }) + '\n');
