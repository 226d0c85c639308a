import { servedBy } from '../dialects/engine.js';
import { dollarPlaceholders, type SqlExecutor } from '../dialects/sql.js';

/** The part of an open PGlite idlease uses. */
export interface PGliteQueryable {
  query(text: string, params: unknown[], options: { rowMode: 'array' }): Promise<{ rows: unknown[]; affectedRows?: number }>;
  /** Absent on the handle a transaction callback receives. */
  transaction?<T>(work: (tx: PGliteQueryable) => Promise<T>): Promise<T>;
}

/**
 * PGlite without knex: what `idlease next` runs on the embedded database, so that a run loads
 * neither knex nor knex-pglite. int8 never reaches PGlite's parsers: idlease's statements
 * read it cast to text.
 */
export function pgliteExecutor(db: PGliteQueryable): SqlExecutor {
  return servedBy(on(db));
}

function on(db: PGliteQueryable): SqlExecutor {
  const self: SqlExecutor = Object.freeze({
    // The driver hook: a PGlite handle speaks PostgreSQL's SQL, in one in-process connection.
    flavor: 'pglite' as const,
    handle: db,
    async run(text: string, values: readonly (string | number)[]) {
      const res = await db.query(dollarPlaceholders(text), [...values], { rowMode: 'array' });
      return { rows: res.rows as unknown[][], affected: res.affectedRows ?? 0 };
    },
    transaction<T>(work: (tx: SqlExecutor) => Promise<T>): Promise<T> {
      if (typeof db.transaction !== 'function') return work(self);
      return db.transaction((tx) => work(on(tx)));
    },
  });
  return self;
}
