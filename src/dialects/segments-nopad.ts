/**
 * The segment table's tag column compared without padding on MySQL/MariaDB. utf8mb4_bin is a PAD
 * SPACE collation: 'order ' equals 'order' there, so `next 'order '` drew from order's row while
 * PostgreSQL (byte comparison) had no such row. A NO PAD binary collation compares as PostgreSQL
 * does: MariaDB's utf8mb4_nopad_bin, MySQL 8's utf8mb4_0900_bin. Tags that are distinct under PAD
 * SPACE stay distinct under NO PAD, so the change never merges two rows.
 */
import type { SqlExecutor } from './sql.js';
import { ownObject, ownSchema } from './detect.js';
import { currentSchemaExpr } from './flavor.js';

/** The NO PAD binary collations, in the order they are preferred (the first the server has is used). */
const NO_PAD_COLLATIONS = ['utf8mb4_nopad_bin', 'utf8mb4_0900_bin'] as const;

/** The statements that make `tag` NO PAD on this server; none when it already is, or the table is not there. */
export async function segmentTagNoPadDdl(db: SqlExecutor, schema: string | undefined, table: string): Promise<string[]> {
  const have = await db.run(
    `SELECT COLLATION_NAME AS name FROM information_schema.COLLATIONS WHERE COLLATION_NAME IN (${NO_PAD_COLLATIONS.map(() => '?').join(', ')})`,
    [...NO_PAD_COLLATIONS],
  );
  const names = new Set(have.rows.map((r) => String(r[0])));
  const collation = NO_PAD_COLLATIONS.find((c) => names.has(c));
  if (collation === undefined) return [];
  const where = ownSchema('mysql', schema);
  const current = await db.run(
    `SELECT COLLATION_NAME AS name FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ${where === undefined ? currentSchemaExpr('mysql') : '?'} AND TABLE_NAME = ? AND COLUMN_NAME = 'tag'`,
    where === undefined ? [table] : [where, table],
  );
  const row = current.rows[0];
  if (row === undefined || String(row[0]) === collation) return [];
  // collation is one of NO_PAD_COLLATIONS: a fixed identifier, not input.
  return [`ALTER TABLE ${ownObject('mysql', schema, table)} MODIFY tag varchar(128) CHARACTER SET utf8mb4 COLLATE ${collation} NOT NULL`];
}
