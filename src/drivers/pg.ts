import { servedBy } from '../dialects/engine.js';
import { dollarPlaceholders, inTransaction, type SqlExecutor } from '../dialects/sql.js';

type PgQuery = (config: {
  text: string;
  values: unknown[];
  rowMode: 'array';
  types: { getTypeParser(oid: number, format?: string): (value: string) => unknown };
}) => Promise<{ rows: unknown[][]; rowCount: number | null }>;

/** The part of a `pg.Pool` or `pg.Client` idlease uses. */
export interface PgQueryable {
  query: PgQuery;
  /** pg.Pool: a client of the pool, given back with release(err). pg.Client: connect() opens it (not used). */
  connect(): Promise<unknown>;
}

interface PgPoolClient {
  query: PgQuery;
  release(err?: Error | boolean): void;
}

export function isPgPool(x: unknown): x is PgQueryable {
  const o = x as Record<string, unknown> | null;
  return (
    typeof o === 'object' &&
    o !== null &&
    typeof o.query === 'function' &&
    typeof o.connect === 'function' &&
    ('idleCount' in o || 'connectionParameters' in o)
  );
}

/**
 * Every column comes back as the server's text, whatever parsers the pool has installed
 * (`pg.types.setTypeParser(20, parseInt)` is common and would round int8): the per-query
 * `types` replaces them for idlease's statements only.
 */
const RAW_TEXT = Object.freeze({ getTypeParser: () => (value: string) => value });

export function pgExecutor(pool: PgQueryable): SqlExecutor {
  // A pg.Client is one connection already; a pg.Pool lends one for the transaction.
  const isPool = 'idleCount' in pool;
  return servedBy(
    on(pool, pool.query.bind(pool), async (work) => {
      if (!isPool) return inTransaction(on(pool, pool.query.bind(pool), undefined), work);
      const client = (await pool.connect()) as PgPoolClient;
      let broken: Error | undefined;
      try {
        return await inTransaction(on(pool, client.query.bind(client), undefined), work);
      } catch (err) {
        // A client whose ROLLBACK may not have run must not go back to the app's pool.
        broken = err instanceof Error ? err : new Error(String(err));
        throw err;
      } finally {
        client.release(broken);
      }
    }),
  );
}

function on(
  handle: object,
  query: PgQuery,
  transaction: (<T>(work: (tx: SqlExecutor) => Promise<T>) => Promise<T>) | undefined,
): SqlExecutor {
  const self: SqlExecutor = Object.freeze({
    // The driver hook: pg speaks PostgreSQL's protocol; engine.ts asks which server it is.
    flavor: 'postgres' as const,
    handle,
    async run(text: string, values: readonly (string | number)[]) {
      const res = await query({ text: dollarPlaceholders(text), values: [...values], rowMode: 'array', types: RAW_TEXT });
      return { rows: res.rows, affected: res.rowCount ?? 0 };
    },
    transaction: transaction ?? (<T>(work: (tx: SqlExecutor) => Promise<T>) => work(self)),
  });
  return self;
}
