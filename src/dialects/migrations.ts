/** SQL on idlease's migrations table (knex's bookkeeping format, written by knex's migrator). */
import { qualified } from './detect.js';
import { isMissingTable } from './missing-object.js';
import type { SqlExecutor } from './sql.js';

/** The names of the migrations recorded as applied; undefined when the table (or its schema) does not exist. */
export async function appliedMigrationNames(db: SqlExecutor, schema: string | undefined, table: string): Promise<Set<string> | undefined> {
  try {
    const res = await db.run(`SELECT name FROM ${qualified(db.flavor, schema, table)}`, []);
    return new Set(res.rows.map((r) => String(r[0])));
  } catch (err) {
    if (isMissingTable(err)) return undefined;
    throw err;
  }
}
