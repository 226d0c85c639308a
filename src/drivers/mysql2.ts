import type { SqlExecutor, SqlResult } from '../dialects/sql.js';

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
  return typeof o === 'object' && o !== null && typeof o.query === 'function' && typeof o.execute === 'function'
    && typeof (o.config as Record<string, unknown> | undefined) === 'object' && typeof o.escape === 'function';
}

/** The callback pool or connection behind a mysql2 pool, promise pool, connection or promise connection. */
export function mysql2Core(x: unknown): Mysql2Queryable | undefined {
  if (isCallbackCore(x)) return x;
  const o = x as { pool?: unknown; connection?: unknown } | null;
  if (typeof o !== 'object' || o === null) return undefined;
  if (isCallbackCore(o.pool)) return o.pool;
  if (isCallbackCore(o.connection)) return o.connection;
  return undefined;
}

const keepDefault = (_field: unknown, next: () => unknown) => next();

/**
 * Per-query options override the pool's: rows as arrays (column order, not names), `?`
 * placeholders even when the pool enabled named ones, BIGINT as exact strings, and the
 * driver's own conversion instead of a pool-wide `typeCast`. The lease's value comes in the
 * OK packet's insertId, which mysql2 reads exactly (a string past 2^53) whatever the options.
 */
export function mysql2Executor(core: Mysql2Queryable): SqlExecutor {
  return Object.freeze({
    flavor: 'mysql' as const,
    run(text: string, values: readonly (string | number)[]) {
      return new Promise<SqlResult>((resolve, reject) => {
        core.query(
          { sql: text, values: [...values], rowsAsArray: true, namedPlaceholders: false, supportBigNumbers: true, bigNumberStrings: true, typeCast: keepDefault },
          (err, result) => {
            if (err) return reject(err);
            if (Array.isArray(result)) return resolve({ rows: result as unknown[][], affected: 0 });
            const header = result as { affectedRows?: number; insertId?: unknown };
            resolve({ rows: [], affected: header.affectedRows ?? 0, insertId: header.insertId });
          },
        );
      });
    },
  });
}
