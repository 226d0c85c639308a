import { servedBy } from '../dialects/engine.js';
import { dollarPlaceholders, type SqlExecutor } from '../dialects/sql.js';

/** The part of a postgres.js `sql` idlease uses (postgres is an optional peer dependency: no import). */
export interface PostgresJsSql {
  (...args: never[]): unknown;
  unsafe(query: string, parameters: unknown[], options: { prepare: boolean }): { values(): PromiseLike<unknown[][] & { count: number }> };
  /** Absent on the `sql` a transaction callback receives. */
  begin?<T>(work: (tx: PostgresJsSql) => Promise<T>): PromiseLike<T>;
  readonly options?: { readonly prepare?: boolean };
}

export function isPostgresJs(x: unknown): x is PostgresJsSql {
  const f = x as { unsafe?: unknown; begin?: unknown } | null;
  return typeof x === 'function' && typeof f!.unsafe === 'function' && typeof f!.begin === 'function';
}

/**
 * Rows as arrays (`.values()`), so a `transform: postgres.camel` setting cannot rename
 * max_id; int8 is cast to text in the statement. Prepared statements follow the client's
 * own `prepare` setting (off behind PgBouncer in transaction mode).
 */
export function postgresJsExecutor(sql: PostgresJsSql): SqlExecutor {
  return servedBy(on(sql, sql.options?.prepare !== false));
}

function on(sql: PostgresJsSql, prepare: boolean): SqlExecutor {
  const self: SqlExecutor = Object.freeze({
    // The driver hook: postgres.js speaks PostgreSQL's protocol; engine.ts asks which server it is.
    flavor: 'postgres' as const,
    handle: sql,
    async run(text: string, values: readonly (string | number)[]) {
      const rows = await sql.unsafe(dollarPlaceholders(text), [...values], { prepare }).values();
      return { rows, affected: rows.count };
    },
    async transaction<T>(work: (tx: SqlExecutor) => Promise<T>): Promise<T> {
      if (typeof sql.begin !== 'function') return work(self);
      return sql.begin((tx) => work(on(tx, prepare)));
    },
  });
  return self;
}
