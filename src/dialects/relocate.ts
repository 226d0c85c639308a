/**
 * SQL for moving idlease's tables between PostgreSQL schemas (an install made before idlease
 * had a schema of its own sits in the search path). Names are validated by the caller and
 * quoted here; catalog lookups bind them.
 */
import { nextIdLockKey, NEXT_ID_LOCK_CLASS } from './next-id.js';
import { createSchemaSql, qualified } from './detect.js';
import { currentSchemaExpr } from './flavor.js';
import type { SqlExecutor } from './sql.js';

export type RelationKind = 'table' | 'sequence';

/**
 * Serialise relocations (and the schema creation beside them) across processes for the rest
 * of the transaction. `lock_timeout` bounds the wait: an advisory lock is a heavyweight lock,
 * so the setting applies to it as to table locks.
 */
export async function lockRelocation(tx: SqlExecutor, timeoutMs: number): Promise<void> {
  await tx.run(`SET LOCAL lock_timeout = ${Math.max(1, Math.ceil(timeoutMs))}`, []);
  await tx.run('SELECT pg_catalog.pg_advisory_xact_lock(CAST(? AS integer), CAST(? AS integer))', [
    NEXT_ID_LOCK_CLASS,
    nextIdLockKey('idlease relocate'),
  ]);
}

/**
 * Create the schema unless it exists. Looked up first because CREATE SCHEMA IF NOT EXISTS
 * checks the CREATE privilege on the database before it checks existence: a role that may
 * not create schemas could not migrate into one a DBA made for it.
 */
export async function ensureSchema(db: SqlExecutor, schema: string): Promise<void> {
  const res = await db.run('SELECT 1 AS one FROM pg_catalog.pg_namespace WHERE nspname = ?', [schema]);
  if (res.rows.length === 0) await db.run(createSchemaSql('postgres', schema), []);
}

/** Where unqualified CREATE TABLE went: the first schema of the search path that exists. */
export async function currentSchema(db: SqlExecutor): Promise<string | undefined> {
  const s = (await db.run(`SELECT ${currentSchemaExpr('postgres')} AS s`, [])).rows[0]?.[0];
  return typeof s === 'string' ? s : undefined;
}

/** Which of `names` exist in `schema` as tables or sequences. */
export async function relationsIn(db: SqlExecutor, schema: string, names: readonly string[]): Promise<Map<string, RelationKind>> {
  if (names.length === 0) return new Map();
  const res = await db.run(
    `SELECT c.relname::text AS name, c.relkind::text AS kind
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ? AND c.relname IN (${names.map(() => '?').join(', ')}) AND c.relkind IN ('r', 'p', 'S')`,
    [schema, ...names],
  );
  return new Map(res.rows.map(([name, kind]) => [String(name), kind === 'S' ? 'sequence' : 'table'] as const));
}

/** The names recorded in a knex migrations table. */
export async function recordedMigrations(db: SqlExecutor, schema: string, table: string): Promise<string[]> {
  const res = await db.run(`SELECT name FROM ${qualified('postgres', schema, table)} ORDER BY id`, []);
  return res.rows.map(([name]) => String(name));
}

/**
 * Whether knex's lock row in `<table>` is set (a migration running, or a crashed one's
 * leftover). The row stays locked until the caller's transaction ends, so a migrator that
 * comes after the check cannot take knex's lock under the move.
 */
export async function migrationLockHeld(db: SqlExecutor, schema: string, lockTable: string): Promise<boolean> {
  const res = await db.run(`SELECT is_locked FROM ${qualified('postgres', schema, lockTable)} FOR UPDATE`, []);
  return res.rows.some(([locked]) => Number(locked) === 1);
}

export async function isEmptyTable(db: SqlExecutor, schema: string, table: string): Promise<boolean> {
  return (await db.run(`SELECT 1 AS one FROM ${qualified('postgres', schema, table)} LIMIT 1`, [])).rows.length === 0;
}

export async function dropTable(db: SqlExecutor, schema: string, table: string): Promise<void> {
  await db.run(`DROP TABLE ${qualified('postgres', schema, table)}`, []);
}

/**
 * Move one relation: its rows, indexes, constraints and owned sequences go with it. The
 * ACCESS EXCLUSIVE lock waits for statements running on it; one that queues behind the move
 * looks the name up again once it gets the lock (PostgreSQL retries the lookup after
 * invalidations) and, by the old name, finds nothing: a missing table, never a stale one.
 */
export async function setSchema(db: SqlExecutor, from: string, name: string, kind: RelationKind, to: string): Promise<void> {
  await db.run(
    `ALTER ${kind === 'sequence' ? 'SEQUENCE' : 'TABLE'} ${qualified('postgres', from, name)} SET SCHEMA ${qualified('postgres', undefined, to)}`,
    [],
  );
}
