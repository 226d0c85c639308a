import type { Flavor } from '../dialects/detect.js';
import { servedBy } from '../dialects/engine.js';
import { knexFlavor } from './knex-family.js';
import type { SqlExecutor, SqlResult } from '../dialects/sql.js';
import { isReadOnlyServer } from '../dialects/driver-errors.js';

/**
 * What idlease uses of a Knex instance or transaction, by shape: outside the migration code
 * (knex by design) no module of idlease names knex's own types, so an app that hands idlease a
 * pool never needs knex's typings to compile against idlease's.
 */
export interface KnexLike {
  raw(sql: string, bindings: readonly unknown[]): PromiseLike<unknown>;
  transaction<T>(work: (trx: KnexLike) => Promise<T>): Promise<T>;
  readonly client: unknown;
}

/** A Knex instance or transaction: a function with `raw` and a `client` object (pools have no `raw`). */
export function isKnex(x: unknown): x is KnexLike {
  const k = x as { raw?: unknown; client?: unknown } | null;
  return typeof x === 'function' && typeof k!.raw === 'function' && typeof k!.client === 'object' && k!.client !== null;
}

/**
 * knex runs `?` statements on mysql2, pg and PGlite alike; its row objects keep the column
 * order. mysql2 answers [rows | OK packet, fields], pg and PGlite `{ rows, rowCount }`.
 * Given a knex transaction (a migration's), `transaction()` stays in it: a nested knex
 * transaction would be a savepoint, and idlease's transactions are flat.
 */
export function knexExecutor(knex: KnexLike): SqlExecutor {
  return servedBy(on(knex, knexFlavor(knex), (knex as { isTransaction?: unknown }).isTransaction === true));
}

/** Marks a knex config with the handle its server's engine is kept under (engine.ts). */
const HANDLE = Symbol('idlease handle');

/**
 * The handle a knex instance's engine is kept under. knex makes new client objects for a
 * transaction (sharing the config) and for its migrator (copying the config's own properties into
 * a new object, `withUserParams`): an enumerable symbol on the config travels with both, so every
 * face of one knex instance asks the server once between them.
 */
function handleOf(knex: KnexLike): object {
  const config = (knex.client as { config?: Record<symbol, unknown> }).config;
  if (typeof config !== 'object' || config === null || (!(HANDLE in config) && !Object.isExtensible(config))) return knex.client as object;
  if (typeof config[HANDLE] !== 'object') Object.defineProperty(config, HANDLE, { value: {}, enumerable: true });
  return config[HANDLE] as object;
}

function on(knex: KnexLike, flavor: Flavor, inTransaction: boolean): SqlExecutor {
  const self: SqlExecutor = Object.freeze({
    flavor,
    handle: handleOf(knex),
    async run(text: string, values: readonly (string | number)[]): Promise<SqlResult> {
      let res: unknown;
      try {
        res = await knex.raw(text, values);
      } catch (err) {
        if (isReadOnlyServer(err) && !inTransaction) retireIdleConnections(knex, err);
        throw err;
      }
      // mysql2 answers [rows | OK packet, fields]; pg and PGlite an object with rows.
      if (Array.isArray(res)) {
        const first = (res as [unknown])[0];
        if (Array.isArray(first)) return { rows: first.map((r: object) => Object.values(r)), affected: 0 };
        const header = first as { affectedRows?: number; insertId?: unknown };
        return { rows: [], affected: header.affectedRows ?? 0, insertId: header.insertId };
      }
      const { rows, rowCount } = res as { rows: object[]; rowCount: number | null };
      return { rows: rows.map((r) => Object.values(r)), affected: rowCount ?? 0 };
    },
    transaction<T>(work: (tx: SqlExecutor) => Promise<T>): Promise<T> {
      if (inTransaction) return work(self);
      return knex.transaction((trx) => work(on(trx, flavor, true)));
    },
  });
  return self;
}

/**
 * A statement met a server that is not the primary (a demoted primary, a standby behind a stale
 * route): the idle connections of the pool, the one that just failed among them, were opened to it
 * too. knex destroys a connection marked disposed when it next lends it, so the retry reconnects
 * through the router instead of landing on the same server again. Pools of other shapes are left alone.
 */
function retireIdleConnections(knex: KnexLike, err: unknown): void {
  const pool = (knex.client as { pool?: { free?: Array<{ resource?: Record<string, unknown> }> } }).pool;
  for (const slot of pool?.free ?? []) {
    if (slot.resource && typeof slot.resource === 'object') slot.resource.__knex__disposed = err;
  }
}

/**
 * Where and as whom a knex on MySQL connects, for connections of idlease's own (the ticket
 * sessions, which must never be the app's): its connection settings, or what its connection
 * provider answers, asked again for every new connection so that rotated credentials are followed.
 */
export function knexConnectionSettings(knex: KnexLike): () => Promise<Record<string, unknown>> {
  const client = knex.client as { config?: { connection?: unknown }; connectionSettings?: Record<string, unknown> };
  const provider = client.config?.connection;
  if (typeof provider === 'function') return async () => ((await (provider as () => unknown)()) ?? {}) as Record<string, unknown>;
  // knex keeps the password as a hidden property of connectionSettings: read by name, it is there.
  return async () => client.connectionSettings ?? {};
}

/**
 * One connection of the knex instance's own driver and settings, outside its pool: for checks
 * that must never queue behind the pool's work (serve's /readyz). Undefined for PGlite, which
 * has one connection only. `ping` opens it on first use and again after a failure.
 */
export function sideConnection(knex: KnexLike): { ping(): Promise<void>; close(): Promise<void> } | undefined {
  const client = knex.client as {
    driverName?: string;
    acquireRawConnection(): Promise<unknown>;
    destroyRawConnection(conn: unknown): Promise<void>;
  };
  // Only the network drivers: the embedded client (knex-pglite) names itself otherwise and has one connection.
  if (typeof client.acquireRawConnection !== 'function' || !['pg', 'mysql2'].includes(client.driverName ?? '')) return undefined;
  let conn: Promise<unknown> | undefined;
  const drop = async () => {
    const c = conn;
    conn = undefined;
    if (c) await c.then((x) => client.destroyRawConnection(x)).catch(() => undefined);
  };
  return {
    async ping() {
      conn ??= client.acquireRawConnection();
      try {
        const c = (await conn) as { query(sql: string, cb?: (err: unknown) => void): unknown };
        // mysql2's connection (callback API) takes a callback (its Query throws on .then); pg's Client.query returns a promise.
        if (client.driverName === 'mysql2')
          await new Promise<void>((resolve, reject) => void c.query('SELECT 1', (err: unknown) => (err ? reject(err) : resolve())));
        else await (c.query('SELECT 1') as Promise<unknown>);
      } catch (err) {
        await drop();
        throw err;
      }
    },
    close: drop,
  };
}
