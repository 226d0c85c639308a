/**
 * The install id: one row, one random id, written by `migrate` beside the segment table. It names
 * an install of idlease, not a server: a promoted replica or a restored backup carries the same row
 * (the same install), while two databases migrated apart never share one. What is bound to an
 * install (a Redis sequence's key: src/redis-sequence/) reads it here.
 */
import { randomUUID } from 'node:crypto';
import { ownObject, ownObjectName, type Flavor } from './detect.js';
import { fromDual, perDialect, type PerDialect } from './flavor.js';
import { isMissingTable, notMigratedError } from './missing-object.js';
import type { SqlExecutor } from './sql.js';
import { withDeadline } from '../runtime/deadline.js';

export const INSTALL_TABLE = 'idlease_install';

/** DDL of the install table; `insert` takes the new id as its one bound value and does nothing when a row exists. */
export function installTableDdl(flavor: Flavor, schema: string | undefined): { create: string; insert: string; down: string } {
  const t = ownObject(flavor, schema, INSTALL_TABLE);
  const create = perDialect(flavor, INSTALL_TABLE_DDL)(t);
  const insert = `INSERT INTO ${t} (id) SELECT ?${fromDual(flavor)} WHERE NOT EXISTS (SELECT 1 FROM ${t})`;
  return { create, insert, down: `DROP TABLE IF EXISTS ${t}` };
}

const INSTALL_TABLE_DDL: PerDialect<(t: string) => string> = {
  mysql: (t) => `CREATE TABLE IF NOT EXISTS ${t} (
  id varchar(64) NOT NULL,
  created_at timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  postgres: (t) => `CREATE TABLE IF NOT EXISTS ${t} (
  id varchar(64) PRIMARY KEY,
  created_at timestamptz NOT NULL DEFAULT now()
)`,
};

/**
 * Write a new random install id unless the table already holds one: what the install migration
 * does, and what the first open of an embedded directory made from the shipped template does
 * (the template carries the table but no id, so that no two directories share one).
 */
export async function writeInstallId(db: SqlExecutor, schema: string | undefined): Promise<void> {
  await db.run(installTableDdl(db.flavor, schema).insert, [randomUUID()]);
}

/** Remove the install id, keeping the table: only for the template `npm run build` ships (src/migrations/embedded-template.ts). */
export async function clearInstallId(db: SqlExecutor, schema: string | undefined): Promise<void> {
  await db.run(`DELETE FROM ${ownObject(db.flavor, schema, INSTALL_TABLE)}`, []);
}

/** The install id (the oldest row, should a copy ever hold two); NOT_MIGRATED when the table or its row is missing. */
export async function readInstallId(db: SqlExecutor, schema: string | undefined, timeoutMs: number): Promise<string> {
  const t = ownObject(db.flavor, schema, INSTALL_TABLE);
  const missing = (cause?: unknown) =>
    notMigratedError({
      what: `The install id of this database (${ownObjectName(db.flavor, schema, INSTALL_TABLE)}, which Redis sequence keys are bound to) is missing.`,
      call: 'migrate(knex)',
      flags: schema === undefined ? '' : `--schema ${schema}`,
      cause,
    });
  let rows: readonly (readonly unknown[])[];
  try {
    rows = (await withDeadline(db.run(`SELECT id FROM ${t} ORDER BY created_at, id`, []), timeoutMs)).rows;
  } catch (err) {
    if (isMissingTable(err)) throw missing(err);
    throw err;
  }
  const id = rows[0]?.[0];
  if (typeof id !== 'string' || id === '') throw missing();
  return id;
}
