/** SQL on idlease's migrations table (knex's bookkeeping format, written by knex's migrator). */
import { qualified, quoteIdent } from './detect.js';
import { fromDual, insertIgnore, perDialect, type PerDialect } from './flavor.js';
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

/**
 * knex creates its lock table's one row by "SELECT, then INSERT if empty": two processes
 * migrating a new database at once can both insert, and with two rows knex's
 * `UPDATE … SET is_locked = 1 WHERE is_locked = 0` never changes exactly one row again, so
 * every later migration waits out its lock timeout (seen on MariaDB: 3 concurrent
 * `idlease migrate`, 1 round in ~10). Here the table and its row are made first, the row under
 * a fixed key so concurrent inserts collide instead of adding a second row; knex then finds
 * both and creates nothing. A table an earlier race left with several unlocked rows is cut
 * back to one.
 */
export async function ensureMigrationLockRow(db: SqlExecutor, schema: string | undefined, table: string): Promise<void> {
  const lock = qualified(db.flavor, schema, `${table}_lock`);
  const [index, isLocked] = [quoteIdent(db.flavor, 'index'), quoteIdent(db.flavor, 'is_locked')];
  await db.run(perDialect(db.flavor, LOCK_TABLE)(lock), []);
  await db.run(
    insertIgnore(
      db.flavor,
      `${lock} (${index}, ${isLocked})`,
      `SELECT 1, 0${fromDual(db.flavor)} WHERE NOT EXISTS (SELECT 1 FROM ${lock})`,
      '',
    ),
    [],
  );
  await dedupeMigrationLockRows(db, schema, table);
}

/** knex's own shape for its lock table (increments('index'), integer('is_locked')). */
const LOCK_TABLE: PerDialect<(lock: string) => string> = {
  mysql: (lock) => `CREATE TABLE IF NOT EXISTS ${lock} (\`index\` int unsigned NOT NULL AUTO_INCREMENT PRIMARY KEY, \`is_locked\` int)`,
  postgres: (lock) => `CREATE TABLE IF NOT EXISTS ${lock} ("index" serial PRIMARY KEY, "is_locked" integer)`,
};

/** Keep the lowest row when several exist and none is held (a held one is left to `--unlock`). */
export async function dedupeMigrationLockRows(db: SqlExecutor, schema: string | undefined, table: string): Promise<void> {
  const lock = qualified(db.flavor, schema, `${table}_lock`);
  await db.run(perDialect(db.flavor, DEDUPE_LOCK_ROWS)(lock), []);
}

/** A DELETE that joins the table to itself, per dialect as a whole (MySQL cannot read the table it deletes from but through a derived table). */
const DEDUPE_LOCK_ROWS: PerDialect<(lock: string) => string> = {
  mysql: (lock) =>
    `DELETE a FROM ${lock} a JOIN ${lock} b ON b.\`index\` < a.\`index\` ` +
    `WHERE NOT EXISTS (SELECT 1 FROM (SELECT \`is_locked\` FROM ${lock} WHERE \`is_locked\` <> 0) held)`,
  postgres: (lock) =>
    `DELETE FROM ${lock} a USING ${lock} b WHERE b."index" < a."index" AND NOT EXISTS (SELECT 1 FROM ${lock} WHERE "is_locked" <> 0)`,
};
