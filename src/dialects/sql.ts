/**
 * The seam between the statements this folder writes and the clients that run them (knex, a
 * pg pool, a mysql2 pool, postgres.js): a statement is text with `?` placeholders plus bound
 * values, and a client adapter answers with one result shape. Dialect code never sees a driver.
 */
import type { Flavor } from './detect.js';

export type SqlValue = string | number;

export interface SqlResult {
  /** Rows as arrays in the statement's column order: immune to a client's column renaming (camelCase transforms). */
  readonly rows: readonly (readonly unknown[])[];
  /** Rows an INSERT/UPDATE changed (MySQL: changed, not matched). */
  readonly affected: number;
  /** MySQL's OK-packet insertId (LAST_INSERT_ID(expr)); undefined elsewhere. */
  readonly insertId?: unknown;
}

export interface SqlExecutor {
  /** The SQL family the driver's connection speaks (its hook says so); read in this folder only — above it, ask the engine (engine.ts). */
  readonly flavor: Flavor;
  /**
   * The pool, client or knex the connections come from: what the server said it is (engine.ts) is
   * kept per handle, so the executors of one pool and of its transactions ask once between them.
   */
  readonly handle?: object;
  /** Run one statement. `text` uses `?` placeholders; adapters for `$n` clients renumber them. */
  run(text: string, values: readonly SqlValue[]): Promise<SqlResult>;
  /**
   * Run `work` on one connection between BEGIN and COMMIT; ROLLBACK (and the error) when it
   * throws. Inside, `tx.transaction` runs on the same transaction (no savepoints: idlease's
   * transactions are short and flat). For the few multi-statement steps: a reshard's fence, the
   * `next_id()` bump under its advisory lock.
   */
  transaction<T>(work: (tx: SqlExecutor) => Promise<T>): Promise<T>;
}

/** The `transaction` of an executor that is already inside one (a pinned connection). */
export function flatTransaction(tx: SqlExecutor) {
  return <T>(work: (inner: SqlExecutor) => Promise<T>): Promise<T> => work(tx);
}

/**
 * BEGIN/COMMIT/ROLLBACK on a pinned connection's executor, for drivers without a transaction
 * helper of their own. A failed ROLLBACK (the connection died) leaves the work's error standing:
 * the caller then releases the connection as broken.
 */
export async function inTransaction<T>(tx: SqlExecutor, work: (tx: SqlExecutor) => Promise<T>): Promise<T> {
  await tx.run('BEGIN', []);
  let result: T;
  try {
    result = await work(tx);
  } catch (err) {
    await tx.run('ROLLBACK', []).catch(() => undefined);
    throw err;
  }
  await tx.run('COMMIT', []);
  return result;
}

const numbered = new Map<string, string>();

/**
 * `?` → `$1, $2, …` for pg and postgres.js. idlease's statements hold no `?` inside literals or
 * operators, so a plain scan is exact; the texts are few and fixed, so each is converted once.
 */
export function dollarPlaceholders(text: string): string {
  let out = numbered.get(text);
  if (out === undefined) {
    let n = 0;
    out = text.replace(/\?/g, () => `$${++n}`);
    if (numbered.size < 1000) numbered.set(text, out);
  }
  return out;
}
