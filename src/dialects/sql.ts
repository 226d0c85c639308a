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
  readonly flavor: Flavor;
  /** Run one statement. `text` uses `?` placeholders; adapters for `$n` clients renumber them. */
  run(text: string, values: readonly SqlValue[]): Promise<SqlResult>;
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
