/**
 * Moving an install made before idlease had a schema of its own. Such a database has
 * idlease's tables and its migrations table in the search path (usually public). If migrate
 * simply looked in the new schema it would find no bookkeeping, create empty tables there, and
 * segment IDs would be handed out again from 1; so the first migrate into a schema moves what
 * the old install recorded, rows and all, before knex looks.
 *
 * Only what is provably idlease's moves. A migrations table of that name in the search path is
 * not enough: the knex CLI route (README) keeps today's bookkeeping in public while the files
 * install into schema idlease, and a user may share knex's own `knex_migrations` with idlease.
 * Moving such a table takes the bookkeeping from under the knex CLI, which then re-runs every
 * step. An older install is one whose bookkeeping records idlease's migrations only and whose
 * recorded tables are still beside it.
 */
import { INSTALL_TABLE } from '../dialects/install.js';
import type { Knex } from 'knex';
import {
  currentSchema,
  dropTable,
  ensureSchema,
  isEmptyTable,
  lockRelocation,
  migrationLockHeld,
  recordedMigrations,
  relationsIn,
  setSchema,
} from '../dialects/relocate.js';
import { SCHEME_TABLE, ticketObjectName } from '../dialects/tickets.js';
import { knexExecutor } from '../drivers/knex.js';
import { IdleaseError } from '../errors.js';
import { DEFAULT_SEGMENT_TABLE } from '../identifiers.js';
import { DEFAULT_WORKER_TABLE } from './workers.js';

/**
 * idlease's knex migration files (migrations/), by name without extension, and the tables and
 * sequences each installs. A file of the app's that merely ends in `_segments` is not one.
 */
const KNEX_FILES: ReadonlyMap<string, readonly string[]> = new Map([
  ['20261122000001_segments', [DEFAULT_SEGMENT_TABLE]],
  ['20261122000002_tickets', [ticketObjectName('default'), SCHEME_TABLE]],
  ['20261122000003_next_id', []],
  ['20261123000001_next_id_v2', []],
  ['20261123000004_workers', [DEFAULT_WORKER_TABLE]],
  ['20261124000001_workers_v2', []],
  ['20261125000001_install', [INSTALL_TABLE]],
  ['20261125000002_segments_v2', []],
  ['20261125000003_tickets_v2', []],
  ['20261127000001_segments_v3', []],
  ['20261127000002_segments_nopad', []],
]);

const IN_CODE_KINDS = new Set(['segments', 'tickets', 'workers', 'next_id', 'install']);

/** Whether a name recorded in a migrations table is one idlease records (migrate() or its knex files). */
export function isIdleaseMigration(name: string): boolean {
  const [kind, arg] = name.split(':', 2) as [string, string | undefined];
  if (arg !== undefined) return IN_CODE_KINDS.has(kind) && arg.length > 0;
  return KNEX_FILES.has(name.replace(/\.(ts|js|mjs|cjs)$/, ''));
}

/**
 * The tables and sequences a recorded migration created. next_id() entries name none: its
 * schema is the user's choice and it stays there. The knex files (migrations/) install the
 * defaults under their own names.
 */
export function objectsOfMigration(name: string): string[] {
  if (!isIdleaseMigration(name)) return [];
  const [kind, arg] = name.split(':', 2) as [string, string | undefined];
  if (arg !== undefined) {
    if (kind === 'segments' || kind === 'workers' || kind === 'install') return [arg];
    if (kind === 'tickets') return [ticketObjectName(arg), SCHEME_TABLE];
    return [];
  }
  return [...(KNEX_FILES.get(name.replace(/\.(ts|js|mjs|cjs)$/, '')) ?? [])];
}

/** knex's lock row is busy: the caller's retry loop waits, as for knex's own LockError. */
function lockBusy(schema: string, table: string): Error {
  return Object.assign(new Error(`${schema}.${table} is locked: a migration is running there (or a crashed one left its lock)`), {
    name: 'LockError',
  });
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
  knex: Knex,
  opts: { schema: string; migrationsTable: string; lockTimeoutMs: number },
): Promise<Relocation | undefined> {
  const { schema, migrationsTable } = opts;
  const lockTable = `${migrationsTable}_lock`;
  return knexExecutor(knex).transaction(async (trx) => {
    await lockRelocation(trx, opts.lockTimeoutMs);
    // Under the lock: two processes creating the schema at once would collide on the catalog.
    await ensureSchema(trx, schema);
    const from = await currentSchema(trx);
    if (from === undefined || from === schema) return undefined;
    if (!(await relationsIn(trx, from, [migrationsTable])).has(migrationsTable)) return undefined;
    const recorded = await recordedMigrations(trx, from, migrationsTable);
    const objects = await relationsIn(trx, from, [...new Set(recorded.flatMap(objectsOfMigration))]);
    // Bookkeeping whose tables are not beside it is not an older install: the knex CLI's
    // bookkeeping for files that installed into `schema`, or the app's own. It stays.
    if (objects.size === 0) return undefined;
    const existing = await relationsIn(trx, schema, [migrationsTable, lockTable]);
    // A recorded install here is the one this schema means; the other is a separate install.
    if (existing.has(migrationsTable) && !(await isEmptyTable(trx, schema, migrationsTable))) return undefined;
    const foreign = recorded.filter((n) => !isIdleaseMigration(n));
    if (foreign.length > 0) {
      throw new IdleaseError(
        'MIGRATION_FAILED',
        `${from}.${migrationsTable} holds idlease's older install (${[...objects.keys()].map((n) => `${from}.${n}`).join(', ')}) and also migrations that are not idlease's ` +
          `(${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', …' : ''}): it is shared with your app, so idlease will not move it. Nothing was changed. ` +
          `Keep the old location with schema: '${from}' (CLI --schema ${from}), or move idlease's tables into ${schema} yourself and give idlease its own migrationsTable.`,
      );
    }
    if (existing.has(migrationsTable)) {
      // Empty bookkeeping is what knex leaves when a run stopped before its first migration
      // (a knex migration file refused to install beside the old layout): nothing to keep.
      if (existing.has(lockTable) && (await migrationLockHeld(trx, schema, lockTable))) throw lockBusy(schema, lockTable);
      await dropTable(trx, schema, migrationsTable);
      if (existing.has(lockTable)) await dropTable(trx, schema, lockTable);
    }
    const legacyLock = (await relationsIn(trx, from, [lockTable])).has(lockTable);
    // An older idlease may be migrating right now; moving its tables under it would split its work.
    if (legacyLock && (await migrationLockHeld(trx, from, lockTable))) throw lockBusy(from, lockTable);
    const present = new Map([...(await relationsIn(trx, from, [migrationsTable, lockTable])), ...objects]);
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
