/** Reading knex.raw results the same way whichever driver produced them. */
import type { Flavor } from './detect.js';

export type Row = Record<string, unknown>;

/** Rows of a knex.raw result: mysql2 answers [rows, fields], pg and PGlite `{ rows }`. */
export function rowsOf(flavor: Flavor, res: unknown): Row[] {
  if (flavor === 'mysql') return (res as [Row[]])[0];
  return (res as { rows: Row[] }).rows;
}

/** Rows an UPDATE/INSERT changed: mysql2's OK packet `affectedRows`, pg's `rowCount`. */
export function affectedRows(flavor: Flavor, res: unknown): number {
  if (flavor === 'mysql') return (res as [{ affectedRows: number }])[0].affectedRows;
  return (res as { rowCount: number | null }).rowCount ?? 0;
}
