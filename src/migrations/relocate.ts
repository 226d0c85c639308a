/**
 * Moving an install made before idlease had a schema of its own. Such a database has
 * idlease's tables and its migrations table in the search path (usually public). If migrate
 * simply looked in the new schema it would find no bookkeeping, create empty tables there, and
 * segment IDs would be handed out again from 1; so the first migrate into a schema moves what
 * the old install recorded, rows and all, before knex looks.
 */
import type { Knex } from 'knex';
import {
  currentSchema, dropTable, ensureSchema, isEmptyTable, lockRelocation, migrationLockHeld, recordedMigrations, relationsIn, setSchema,
} from '../dialects/relocate.js';
import { SCHEME_TABLE, ticketObjectName } from '../dialects/tickets.js';
import { IdleaseError } from '../errors.js';
import { DEFAULT_SEGMENT_TABLE } from './segments.js';
import { DEFAULT_WORKER_TABLE } from './workers.js';

/**
 * The tables and sequences a recorded migration created. next_id() entries name none: its
 * schema is the user's choice and it stays there. The knex files (migrations/) install the
 * defaults under their own names.
 */
export function objectsOfMigration(name: string): string[] {
  const [kind, arg] = name.split(':', 2) as [string, string | undefined];
  if (arg !== undefined) {
    if (kind === 'segments' || kind === 'workers') return [arg];
    if (kind === 'tickets') return [ticketObjectName(arg), SCHEME_TABLE];
    return [];
  }
  const file = name.replace(/\.(ts|js|mjs|cjs)$/, '');
  if (/^\d+_segments$/.test(file)) return [DEFAULT_SEGMENT_TABLE];
  if (/^\d+_tickets$/.test(file)) return [ticketObjectName('default'), SCHEME_TABLE];
  if (/^\d+_workers$/.test(file)) return [DEFAULT_WORKER_TABLE];
  return [];
}

/** knex's lock row is busy: the caller's retry loop waits, as for knex's own LockError. */
function lockBusy(schema: string, table: string): Error {
  return Object.assign(new Error(`${schema}.${table} is locked: a migration is running there (or a crashed one left its lock)`), { name: 'LockError' });
}

export interface Relocation {
  /** Where the old install was (the connection's current schema). */
  readonly from: string;
  readonly to: string;
  /** The tables and sequences moved, migrations bookkeeping included. */
  readonly moved: readonly string[];
}

/**
 * Move the install found in the connection's current schema into `schema`, in one
 * transaction under an advisory lock, when `schema` holds no install yet. Idempotent: once
 * moved there is nothing left to find. Returns undefined when there was nothing to move.
 */
export async function relocateLegacyInstall(
  knex: Knex, opts: { schema: string; migrationsTable: string; lockTimeoutMs: number },
): Promise<Relocation | undefined> {
  const { schema, migrationsTable } = opts;
  const lockTable = `${migrationsTable}_lock`;
  return knex.transaction(async (trx) => {
    await lockRelocation(trx, opts.lockTimeoutMs);
    // Under the lock: two processes creating the schema at once would collide on the catalog.
    await ensureSchema(trx, schema);
    const from = await currentSchema(trx);
    if (from === undefined || from === schema) return undefined;
    if (!(await relationsIn(trx, from, [migrationsTable])).has(migrationsTable)) return undefined;
    const existing = await relationsIn(trx, schema, [migrationsTable, lockTable]);
    if (existing.has(migrationsTable)) {
      // A recorded install here is the one this schema means; the other is a separate install.
      if (!(await isEmptyTable(trx, schema, migrationsTable))) return undefined;
      // Empty bookkeeping is what knex leaves when a run stopped before its first migration
      // (a knex migration file refused to install beside the old layout): nothing to keep.
      if (existing.has(lockTable) && (await migrationLockHeld(trx, schema, lockTable))) throw lockBusy(schema, lockTable);
      await dropTable(trx, schema, migrationsTable);
      if (existing.has(lockTable)) await dropTable(trx, schema, lockTable);
    }
    const legacyLock = (await relationsIn(trx, from, [lockTable])).has(lockTable);
    // An older idlease may be migrating right now; moving its tables under it would split its work.
    if (legacyLock && (await migrationLockHeld(trx, from, lockTable))) throw lockBusy(from, lockTable);
    const wanted = new Set([migrationsTable, lockTable]);
    for (const name of await recordedMigrations(trx, from, migrationsTable)) for (const o of objectsOfMigration(name)) wanted.add(o);
    const present = await relationsIn(trx, from, [...wanted]);
    const clash = await relationsIn(trx, schema, [...present.keys()]);
    if (clash.size > 0) {
      throw new IdleaseError(
        'MIGRATION_FAILED',
        `idlease's tables from an older install are in ${from}, and ${[...clash.keys()].map((n) => `${schema}.${n}`).join(', ')} already exist(s), so they cannot be moved ` +
          `into ${schema}. Nothing was changed. Keep the old location with schema: '${from}' (CLI --schema ${from}), or drop the objects in ${schema} if they hold nothing you need.`,
      );
    }
    const moved: string[] = [];
    for (const [name, kind] of [...present].sort(([a], [b]) => a.localeCompare(b))) {
      await setSchema(trx, from, name, kind, schema);
      moved.push(name);
    }
    return Object.freeze({ from, to: schema, moved: Object.freeze(moved) });
  });
}
