import { servedBy } from '../dialects/engine.js';
import { inTransaction, type SqlExecutor, type SqlResult } from '../dialects/sql.js';

interface Mysql2QueryOptions {
  sql: string;
  values: unknown[];
  rowsAsArray: true;
  namedPlaceholders: false;
  supportBigNumbers: true;
  bigNumberStrings: true;
  typeCast: (field: unknown, next: () => unknown) => unknown;
}

/** A callback-style mysql2 pool or connection: what `mysql2/promise` objects wrap as `.pool` / `.connection`. */
export interface Mysql2Queryable {
  query(options: Mysql2QueryOptions, callback: (err: Error | null, result: unknown) => void): unknown;
}

function isCallbackCore(x: unknown): x is Mysql2Queryable {
  const o = x as Record<string, unknown> | null;
  return (
    typeof o === 'object' &&
    o !== null &&
    typeof o.query === 'function' &&
    typeof o.execute === 'function' &&
    typeof (o.config as Record<string, unknown> | undefined) === 'object' &&
    typeof o.escape === 'function'
  );
}

/** The callback pool or connection behind a mysql2 pool, promise pool, connection or promise connection. */
export function mysql2Core(x: unknown): Mysql2Queryable | undefined {
  // The promise wrappers also carry query/execute/config/escape, but their query() takes no
  // callback: unwrap first.
  const o = x as { pool?: unknown; connection?: unknown } | null;
  if (typeof o !== 'object' || o === null) return undefined;
  if (isCallbackCore(o.pool)) return o.pool;
  if (isCallbackCore(o.connection)) return o.connection;
  return isCallbackCore(x) ? x : undefined;
}

const keepDefault = (_field: unknown, next: () => unknown) => next();

/**
 * Per-query options override the pool's: rows as arrays (column order, not names), `?`
 * placeholders even when the pool enabled named ones, BIGINT as exact strings, and the
 * driver's own conversion instead of a pool-wide `typeCast`. The lease's value comes in the
 * OK packet's insertId, which mysql2 reads exactly (a string past 2^53) whatever the options.
 */
export function mysql2Executor(core: Mysql2Queryable): SqlExecutor {
  const pool = typeof (core as Partial<Mysql2PoolCore>).getConnection === 'function' ? (core as Mysql2PoolCore) : undefined;
  return servedBy(
    on(core, core, async (work) => {
      // A connection is one session already; a pool lends one for the transaction.
      if (!pool) return inTransaction(on(core, core, undefined), work);
      const conn = await new Promise<Mysql2PooledConnection>((resolve, reject) =>
        pool.getConnection((err, c) => (err ? reject(err) : resolve(c))),
      );
      try {
        const result = await inTransaction(on(core, conn, undefined), work);
        conn.release();
        return result;
      } catch (err) {
        // Its ROLLBACK may not have run: such a connection must not go back to the app's pool.
        conn.destroy();
        throw err;
      }
    }),
  );
}

interface Mysql2PooledConnection extends Mysql2Queryable {
  release(): void;
  destroy(): void;
}

interface Mysql2PoolCore extends Mysql2Queryable {
  getConnection(callback: (err: Error | null, conn: Mysql2PooledConnection) => void): void;
}

/** One statement on a callback pool or connection, with the options above. */
function run(core: Mysql2Queryable, text: string, values: readonly (string | number)[]): Promise<SqlResult> {
  return new Promise<SqlResult>((resolve, reject) => {
    core.query(
      {
        sql: text,
        values: [...values],
        rowsAsArray: true,
        namedPlaceholders: false,
        supportBigNumbers: true,
        bigNumberStrings: true,
        typeCast: keepDefault,
      },
      (err, result) => (err ? reject(err) : resolve(mysql2Result(result))),
    );
  });
}

/** A mysql2 answer, rows already arrays: rows, or the OK packet's counts. */
export function mysql2Result(result: unknown): SqlResult {
  if (Array.isArray(result)) return { rows: result as unknown[][], affected: 0 };
  const header = result as { affectedRows?: number; insertId?: unknown };
  return { rows: [], affected: header.affectedRows ?? 0, insertId: header.insertId };
}

/**
 * The settings a mysql2 pool or connection opens its connections with (a pool keeps them in
 * config.connectionConfig, a connection in config), for connections of idlease's own.
 */
export function mysql2ConnectionSettings(core: Mysql2Queryable): Record<string, unknown> {
  const config = (core as { config?: { connectionConfig?: Record<string, unknown> } & Record<string, unknown> }).config;
  return config?.connectionConfig ?? config ?? {};
}

function on(
  handle: object,
  core: Mysql2Queryable,
  transaction: (<T>(work: (tx: SqlExecutor) => Promise<T>) => Promise<T>) | undefined,
): SqlExecutor {
  const self: SqlExecutor = Object.freeze({
    // The driver hook: mysql2 speaks the MySQL protocol; engine.ts asks whether the server is MariaDB.
    flavor: 'mysql' as const,
    handle,
    run: (text: string, values: readonly (string | number)[]) => run(core, text, values),
    transaction: transaction ?? (<T>(work: (tx: SqlExecutor) => Promise<T>) => work(self)),
  });
  return self;
}
