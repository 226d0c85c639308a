import { dollarPlaceholders, type SqlExecutor } from '../dialects/sql.js';

/** The part of a `pg.Pool` or `pg.Client` idlease uses. */
export interface PgQueryable {
  query(config: { text: string; values: unknown[]; rowMode: 'array'; types: { getTypeParser(oid: number, format?: string): (value: string) => unknown } }): Promise<{ rows: unknown[][]; rowCount: number | null }>;
}

export function isPgPool(x: unknown): x is PgQueryable {
  const o = x as Record<string, unknown> | null;
  return typeof o === 'object' && o !== null && typeof o.query === 'function' && typeof o.connect === 'function'
    && ('idleCount' in o || 'connectionParameters' in o);
}

/**
 * Every column comes back as the server's text, whatever parsers the pool has installed
 * (`pg.types.setTypeParser(20, parseInt)` is common and would round int8): the per-query
 * `types` replaces them for idlease's statements only.
 */
const RAW_TEXT = Object.freeze({ getTypeParser: () => (value: string) => value });

export function pgExecutor(pool: PgQueryable): SqlExecutor {
  return Object.freeze({
    flavor: 'postgres' as const,
    async run(text: string, values: readonly (string | number)[]) {
      const res = await pool.query({ text: dollarPlaceholders(text), values: [...values], rowMode: 'array', types: RAW_TEXT });
      return { rows: res.rows, affected: res.rowCount ?? 0 };
    },
  });
}
