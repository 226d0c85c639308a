/**
 * SQL for moving idlease's tables between PostgreSQL schemas (an install made before idlease
 * had a schema of its own sits in the search path). Names are validated by the caller and
 * quoted here; catalog lookups bind them.
 */
import type { Knex } from 'knex';
import { nextIdLockKey, NEXT_ID_LOCK_CLASS } from './next-id.js';
import { createSchemaSql, qualified } from './detect.js';
import { rowsOf } from './results.js';

export type RelationKind = 'table' | 'sequence';

/**
 * Serialise relocations (and the schema creation beside them) across processes for the rest
 * of the transaction. `lock_timeout` bounds the wait: an advisory lock is a heavyweight lock,
 * so the setting applies to it as to table locks.
 */
export async function lockRelocation(trx: Knex.Transaction, timeoutMs: number): Promise<void> {
  await trx.raw(`SET LOCAL lock_timeout = ${Math.max(1, Math.ceil(timeoutMs))}`);
  await trx.raw('SELECT pg_catalog.pg_advisory_xact_lock(?, ?)', [NEXT_ID_LOCK_CLASS, nextIdLockKey('idlease relocate')]);
}

/**
 * Create the schema unless it exists. Looked up first because CREATE SCHEMA IF NOT EXISTS
 * checks the CREATE privilege on the database before it checks existence: a role that may
 * not create schemas could not migrate into one a DBA made for it.
 */
export async function ensureSchema(knex: Knex, schema: string): Promise<void> {
  const res = await knex.raw('SELECT 1 AS one FROM pg_catalog.pg_namespace WHERE nspname = ?', [schema]);
  if (rowsOf('postgres', res).length === 0) await knex.raw(createSchemaSql('postgres', schema));
}

/** Where unqualified CREATE TABLE went: the first schema of the search path that exists. */
export async function currentSchema(knex: Knex): Promise<string | undefined> {
  const row = rowsOf('postgres', await knex.raw('SELECT pg_catalog.current_schema() AS s'))[0];
  return typeof row?.s === 'string' ? row.s : undefined;
}

/** Which of `names` exist in `schema` as tables or sequences. */
export async function relationsIn(knex: Knex, schema: string, names: readonly string[]): Promise<Map<string, RelationKind>> {
  if (names.length === 0) return new Map();
  const res = await knex.raw(
    `SELECT c.relname::text AS name, c.relkind::text AS kind
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ? AND c.relname IN (${names.map(() => '?').join(', ')}) AND c.relkind IN ('r', 'p', 'S')`,
    [schema, ...names],
  );
  return new Map(rowsOf('postgres', res).map((r) => [String(r.name), r.kind === 'S' ? 'sequence' : 'table'] as const));
}

/** The names recorded in a knex migrations table. */
export async function recordedMigrations(knex: Knex, schema: string, table: string): Promise<string[]> {
  const res = await knex.raw(`SELECT name FROM ${qualified('postgres', schema, table)} ORDER BY id`);
  return rowsOf('postgres', res).map((r) => String(r.name));
}

/**
 * Whether knex's lock row in `<table>` is set (a migration running, or a crashed one's
 * leftover). The row stays locked until the caller's transaction ends, so a migrator that
 * comes after the check cannot take knex's lock under the move.
 */
export async function migrationLockHeld(knex: Knex, schema: string, lockTable: string): Promise<boolean> {
  const res = await knex.raw(`SELECT is_locked FROM ${qualified('postgres', schema, lockTable)} FOR UPDATE`);
  return rowsOf('postgres', res).some((r) => Number(r.is_locked) === 1);
}

export async function isEmptyTable(knex: Knex, schema: string, table: string): Promise<boolean> {
  const res = await knex.raw(`SELECT 1 AS one FROM ${qualified('postgres', schema, table)} LIMIT 1`);
  return rowsOf('postgres', res).length === 0;
}

export async function dropTable(knex: Knex, schema: string, table: string): Promise<void> {
  await knex.raw(`DROP TABLE ${qualified('postgres', schema, table)}`);
}

/**
 * Move one relation: its rows, indexes, constraints and owned sequences go with it. The
 * ACCESS EXCLUSIVE lock waits for statements running on it; one that queues behind the move
 * looks the name up again once it gets the lock (PostgreSQL retries the lookup after
 * invalidations) and, by the old name, finds nothing: a missing table, never a stale one.
 */
export async function setSchema(knex: Knex, from: string, name: string, kind: RelationKind, to: string): Promise<void> {
  await knex.raw(`ALTER ${kind === 'sequence' ? 'SEQUENCE' : 'TABLE'} ${qualified('postgres', from, name)} SET SCHEMA ${qualified('postgres', undefined, to)}`);
}
