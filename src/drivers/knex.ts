import type { Knex } from 'knex';
import { flavorOf } from '../dialects/detect.js';
import type { SqlExecutor, SqlResult } from '../dialects/sql.js';

/**
 * knex runs `?` statements on mysql2, pg and PGlite alike; its row objects keep the column
 * order. mysql2 answers [rows | OK packet, fields], pg and PGlite `{ rows, rowCount }`.
 */
export function knexExecutor(knex: Knex): SqlExecutor {
  const flavor = flavorOf(knex);
  return Object.freeze({
    flavor,
    async run(text: string, values: readonly (string | number)[]): Promise<SqlResult> {
      const res: unknown = await knex.raw(text, values as Knex.RawBinding[]);
      if (flavor === 'mysql') {
        const first = (res as [unknown])[0];
        if (Array.isArray(first)) return { rows: first.map((r: object) => Object.values(r)), affected: 0 };
        const header = first as { affectedRows?: number; insertId?: unknown };
        return { rows: [], affected: header.affectedRows ?? 0, insertId: header.insertId };
      }
      const { rows, rowCount } = res as { rows: object[]; rowCount: number | null };
      return { rows: rows.map((r) => Object.values(r)), affected: rowCount ?? 0 };
    },
  });
}
