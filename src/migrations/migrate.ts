import type { Knex } from 'knex';
import type { Flavor } from '../dialects/detect.js';
import { declaredEngine, engineOf, engineOfFamily, type Engine } from '../dialects/engine.js';
import { appliedMigrationNames, dedupeMigrationLockRows, ensureMigrationLockRow } from '../dialects/migrations.js';
import { currentSchema, relationsIn } from '../dialects/relocate.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { knexExecutor } from '../drivers/knex.js';
import { backoffMs } from '../runtime/backoff.js';
import { SYSTEM_CLOCK } from '../runtime/clock.js';
import { IdleaseError } from '../errors.js';
import { typedConnectionError } from '../dialects/connection-errors.js';
import { validateIdentifier } from '../identifiers.js';
import { nextIdMigrations, resolveNextIdOptions, type NextIdMigrateOptions } from './next-id.js';
import { resolveSegmentsOptions, segmentsMigrations, type SegmentsMigrateOptions } from './segments.js';
import { segmentsNoPadMigrations } from './segments-nopad.js';
import { resolveTicketsOptions, ticketsMigrations, type TicketsMigrateOptions } from './tickets.js';
import { relocateLegacyInstall, type Relocation } from './relocate.js';
import type { IdleaseMigration } from './types.js';
import { installMigrations } from './install.js';
import { resolveWorkersOptions, workersMigrations, type WorkersMigrateOptions } from './workers.js';

export const DEFAULT_MIGRATIONS_TABLE = 'idlease_migrations';

export interface MigrateOptions {
  /**
   * PostgreSQL schema for idlease's tables and its migrations table; created if missing.
   * Default `idlease`, a schema of its own. An install an older idlease left in the search path
   * (usually `public`) is moved into it, rows and all, by the first migrate; `schema: 'public'`
   * keeps it where it is. next_id() is not affected (see `nextId.schema`). On MySQL leave it
   * unset: the database in the connection is used.
   */
  schema?: string;
  /** idlease's own migrations table (never the app's `knex_migrations`). Default `idlease_migrations`. */
  migrationsTable?: string;
  /** The segment table. Default: installed. `false` to leave it out. */
  segments?: boolean | SegmentsMigrateOptions;
  /**
   * The install id (table idlease_install, one random id): what a Redis sequence's key is bound to.
   * Default: installed with the segment table; `true` installs it alone, `false` leaves it out.
   */
  install?: boolean;
  /** Ticket tables (MySQL) / sequences (Postgres). Default: not installed. */
  tickets?: boolean | TicketsMigrateOptions;
  /** Postgres `next_id()`; an array installs several logical shards. Default: not installed. */
  nextId?: boolean | NextIdMigrateOptions | NextIdMigrateOptions[];
  /** The worker-id lease table of snowflake allocators. Default: not installed. */
  workers?: boolean | WorkersMigrateOptions;
  /** `'down'` rolls back the objects these options name. Default `'up'`. */
  direction?: 'up' | 'down';
  /**
   * Down only: also drop state that keeps IDs unique — segment rows that have handed out IDs
   * (max_id > 0), ticket counters that have issued tickets, worker ids leased by running
   * processes. Without it such a down migration refuses (MIGRATION_FAILED naming what would
   * be lost) and drops nothing. Default false.
   */
  dropState?: boolean;
  /** How long to wait for another process's migration to finish. Default 60 000 ms. */
  lockTimeoutMs?: number;
}

export interface MigrateResult {
  /** Names of the migrations this call applied (up) or reverted (down); empty when nothing was to do. */
  readonly applied: readonly string[];
  /** Tables and sequences of an older install this call moved into the schema (PostgreSQL), `from` → `to`, qualified. */
  readonly moved: ReadonlyArray<Readonly<{ from: string; to: string }>>;
  readonly direction: 'up' | 'down';
}

interface Plan {
  /** The engine the plan is for: the server's own answer (migrate) or what a family name stands for (planMigrations('postgres')). */
  readonly engine: Engine;
  readonly schema: string | undefined;
  readonly migrationsTable: string;
  readonly direction: 'up' | 'down';
  readonly lockTimeoutMs: number;
  readonly migrations: readonly IdleaseMigration[];
}

/** Validate options and build the list of migrations, before touching the database. */
export function planMigrations(on: Engine | Flavor, options: MigrateOptions = {}): Plan {
  const engine = engineOfFamily(on);
  if (options === null || typeof options !== 'object') {
    throw new IdleaseError('BAD_CONFIG', 'migrate(knex, options): options must be an object, e.g. { segments: true }.');
  }
  const known = new Set([
    'schema',
    'migrationsTable',
    'segments',
    'install',
    'tickets',
    'nextId',
    'workers',
    'direction',
    'lockTimeoutMs',
    'dropState',
  ]);
  for (const key of Object.keys(options)) {
    if (!known.has(key)) {
      throw new IdleaseError('BAD_CONFIG', `migrate: unknown option ${JSON.stringify(key)}. Known options: ${[...known].join(', ')}.`);
    }
  }
  if (options.schema !== undefined && engine.namespaces !== 'schema') {
    throw new IdleaseError(
      'BAD_CONFIG',
      'schema applies to PostgreSQL only; on MySQL/MariaDB put the database name in the connection instead.',
    );
  }
  const schema = options.schema === undefined ? engine.defaultSchema : validateIdentifier(options.schema, 'schema');
  const direction = options.direction ?? 'up';
  if (direction !== 'up' && direction !== 'down') {
    throw new IdleaseError('BAD_CONFIG', `direction must be 'up' or 'down', got ${JSON.stringify(direction)}.`);
  }
  if (options.dropState !== undefined && typeof options.dropState !== 'boolean') {
    throw new IdleaseError('BAD_CONFIG', `dropState must be true or false, got ${String(options.dropState)}.`);
  }
  const dropState = options.dropState ?? false;
  const lockTimeoutMs = options.lockTimeoutMs ?? 60_000;
  if (!Number.isInteger(lockTimeoutMs) || lockTimeoutMs < 0) {
    throw new IdleaseError('BAD_CONFIG', `lockTimeoutMs must be a non-negative integer (milliseconds), got ${String(lockTimeoutMs)}.`);
  }
  const migrations: IdleaseMigration[] = [];
  const segments = resolveSegmentsOptions(options.segments);
  if (segments)
    migrations.push(...segmentsMigrations(engine.sql, schema, segments, dropState), ...segmentsNoPadMigrations(engine, schema, segments));
  if (options.install !== undefined && typeof options.install !== 'boolean') {
    throw new IdleaseError('BAD_CONFIG', `install must be true or false, got ${String(options.install)}.`);
  }
  if (options.install ?? segments !== undefined) migrations.push(...installMigrations(engine.sql, schema));
  const tickets = resolveTicketsOptions(options.tickets);
  const storage = typeof options.tickets === 'object' && options.tickets !== null ? options.tickets.engine : undefined;
  if (storage !== undefined && !engine.supportsStorageEngines) {
    // A Postgres ticket server is a sequence: there is no storage engine to choose, and
    // accepting one silently would let a user believe they picked durability (or speed).
    throw new IdleaseError(
      'BAD_CONFIG',
      `tickets.engine (--tickets-engine ${storage}) applies to MySQL/MariaDB only; PostgreSQL ticket servers are sequences. Leave the option out on PostgreSQL/PGlite.`,
    );
  }
  if (tickets) migrations.push(...ticketsMigrations(engine, schema, tickets, dropState));
  const workers = resolveWorkersOptions(options.workers);
  if (workers) migrations.push(...workersMigrations(engine.sql, schema, workers, dropState));
  const nextIds = resolveNextIdOptions(options.nextId);
  if (engine.nextId === 'ticker' && nextIds.length > 0) refuseMysqlNextIdSchema(options.nextId);
  for (const n of nextIds) migrations.push(...nextIdMigrations(engine, n));
  const names = new Set<string>();
  for (const m of migrations) {
    if (names.has(m.name)) throw new IdleaseError('BAD_CONFIG', `migrate: ${m.name} is named twice in the options.`);
    names.add(m.name);
  }
  return Object.freeze({
    engine,
    schema,
    migrationsTable: validateIdentifier(options.migrationsTable ?? DEFAULT_MIGRATIONS_TABLE, 'migrationsTable'),
    direction,
    lockTimeoutMs,
    migrations: Object.freeze(migrations),
  });
}

/**
 * On MariaDB next_id() is one logical shard per database (its sequence, ticker and state live
 * in the connection's database): schemas and several shards in one call have no meaning there.
 */
function refuseMysqlNextIdSchema(input: MigrateOptions['nextId']): void {
  const list = Array.isArray(input) ? input : typeof input === 'object' && input !== null ? [input] : [];
  if (list.length > 1 || list.some((o) => o.schema !== undefined || o.shards !== undefined)) {
    throw new IdleaseError(
      'BAD_CONFIG',
      "nextId on MySQL/MariaDB installs one logical shard in the connection's database: leave out schema and shards (CLI: --next-id-schema, --shards), and use one database per shard.",
    );
  }
}

class InCodeSource implements Knex.MigrationSource<IdleaseMigration> {
  constructor(private readonly list: readonly IdleaseMigration[]) {}
  getMigrations(): Promise<IdleaseMigration[]> {
    return Promise.resolve([...this.list]);
  }
  getMigrationName(m: IdleaseMigration): string {
    return m.name;
  }
  getMigration(m: IdleaseMigration): Promise<Knex.Migration> {
    return Promise.resolve({ up: (k: Knex) => m.up(k), down: (k: Knex) => m.down(k) });
  }
}

/**
 * A refusal that names its own fix, a database that cannot be reached or a wrong password is not a
 * broken migration: keep its code (and its retry hint); anything else is MIGRATION_FAILED.
 */
function migrateFailure(direction: 'up' | 'down') {
  return (err: unknown): never => {
    const typed = typedConnectionError(err);
    if (typed instanceof IdleaseError) throw typed;
    throw new IdleaseError('MIGRATION_FAILED', `idlease migrate (${direction}) failed: ${(err as Error).message}`, { cause: err });
  };
}

/** Knex's lock, and the create-if-missing race on its own tables, are what two processes meet. */
function isRetryableRace(err: unknown): boolean {
  const e = err as { name?: string; message?: string; code?: string; errno?: number };
  return (
    e?.name === 'LockError' ||
    /already locked|already exists|duplicate key|Duplicate entry|ER_TABLE_EXISTS|deadlock/i.test(String(e?.message)) ||
    e?.code === '23505' ||
    e?.code === '42P07' ||
    e?.code === '40P01' ||
    e?.errno === 1050 ||
    e?.errno === 1213 ||
    // lock_timeout on the relocation lock: the budget is spent, the deadline message follows.
    e?.code === '55P03'
  );
}

/**
 * Install (or with `direction: 'down'` remove) idlease's objects. Idempotent: migrating
 * twice is a no-op. Safe to call from several processes at once: a caller that meets
 * another's migration waits for it (bounded by lockTimeoutMs) and then finds nothing to do.
 */
export async function migrate(knex: Knex, options: MigrateOptions = {}): Promise<MigrateResult> {
  const exec = knexExecutor(knex);
  // Options are refused before the database is touched; then the plan is made for the engine the
  // server says it is, and a server idlease is not tested on (MySQL 8, CockroachDB) is refused
  // with what it is, instead of half-installing.
  planMigrations(declaredEngine(exec), options);
  const plan = planMigrations(await engineOf(exec).catch(migrateFailure('up')), options);
  const config: Knex.MigratorConfig = {
    tableName: plan.migrationsTable,
    migrationSource: new InCodeSource(plan.migrations),
    // Other calls may install other objects into the same table: not every recorded
    // name is in this call's list, and that is fine.
    disableMigrationsListValidation: true,
    ...(plan.schema ? { schemaName: plan.schema } : {}),
  };
  const deadline = Date.now() + plan.lockTimeoutMs;
  let relocation: Relocation | undefined;
  for (let attempt = 0; ; attempt++) {
    try {
      // Before knex reads its bookkeeping, in both directions: down must find what up installed.
      // A retry after a move finds nothing left to move, so the first attempt's result is kept.
      if (plan.schema !== undefined && plan.engine.namespaces === 'schema') {
        const r = await relocateLegacyInstall(knex, {
          schema: plan.schema,
          migrationsTable: plan.migrationsTable,
          lockTimeoutMs: Math.max(1, deadline - Date.now()),
        });
        relocation ??= r;
      }
      await ensureMigrationLockRow(knexExecutor(knex), plan.schema, plan.migrationsTable);
      if (plan.direction === 'up') for (const m of plan.migrations) await m.refuseUp?.(knex);
      const applied = plan.direction === 'up' ? await up(knex, config) : await down(knex, config, plan);
      const moved = relocation
        ? relocation.moved.map((n) => Object.freeze({ from: `${relocation!.from}.${n}`, to: `${relocation!.to}.${n}` }))
        : [];
      return Object.freeze({ applied: Object.freeze(applied), moved: Object.freeze(moved), direction: plan.direction });
    } catch (err) {
      if (!isRetryableRace(err)) {
        // A refusal that names its own fix, a database that cannot be reached or a wrong
        // password is not a broken migration: keep its code (and its retry hint).
        migrateFailure(plan.direction)(err);
      }
      if (Date.now() >= deadline) {
        throw new IdleaseError(
          'MIGRATION_FAILED',
          `Another migration held idlease's migration lock for more than ${plan.lockTimeoutMs} ms. If no migration is running ` +
            `(a crashed one leaves the lock set), free it: idlease migrate --unlock (or npx knex migrate:unlock with tableName ${plan.migrationsTable}).`,
          { cause: err },
        );
      }
      await SYSTEM_CLOCK.sleep(backoffMs(attempt, 25, 1000));
    }
  }
}

/**
 * Whether every migration `options` names is already applied: one SELECT, no knex, no lock.
 * True means `migrate(knex, options)` would do nothing (an older install is never moved into a
 * schema whose bookkeeping records migrations); false means call it. The CLI asks this first
 * on the embedded database, which it migrates on every run, so a current directory costs one
 * statement instead of knex's migrator (about twenty).
 */
export async function isMigrated(db: SqlExecutor, options: Omit<MigrateOptions, 'direction'> = {}): Promise<boolean> {
  const plan = planMigrations(await engineOf(db), options);
  const applied = await appliedMigrationNames(db, plan.schema, plan.migrationsTable);
  return applied !== undefined && plan.migrations.every((m) => applied.has(m.name));
}

async function up(knex: Knex, config: Knex.MigratorConfig): Promise<string[]> {
  const [, log] = (await knex.migrate.latest(config)) as [number, string[]];
  return log;
}

async function down(knex: Knex, config: Knex.MigratorConfig, plan: Plan): Promise<string[]> {
  const [completed] = (await knex.migrate.list(config)) as [Array<{ name: string } | string>, unknown[]];
  const done = new Set(completed.map((c) => (typeof c === 'string' ? c : c.name)));
  // Every refusal before any drop: a rollback of several objects either drops all or none.
  for (const m of plan.migrations) if (done.has(m.name)) await m.refuseDown?.(knex);
  const reverted: string[] = [];
  for (const m of [...plan.migrations].reverse()) {
    if (!done.has(m.name)) continue;
    await knex.migrate.down({ ...config, name: m.name });
    reverted.push(m.name);
  }
  return reverted;
}

/**
 * Release a migration lock left behind by a crashed migration: in the schema's bookkeeping
 * and, on PostgreSQL, in an older install's bookkeeping still in the search path (the lock
 * that would hold up its move).
 */
export async function unlockMigrations(knex: Knex, options: Pick<MigrateOptions, 'schema' | 'migrationsTable'> = {}): Promise<void> {
  const plan = planMigrations(await engineOf(knexExecutor(knex)), {
    schema: options.schema,
    migrationsTable: options.migrationsTable,
    segments: false,
  });
  await knex.migrate.forceFreeMigrationsLock({ tableName: plan.migrationsTable, ...(plan.schema ? { schemaName: plan.schema } : {}) });
  const db = knexExecutor(knex);
  await dedupeMigrationLockRows(db, plan.schema, plan.migrationsTable);
  if (plan.engine.namespaces !== 'schema') return;
  const legacy = await currentSchema(db);
  if (legacy === undefined || legacy === plan.schema) return;
  if ((await relationsIn(db, legacy, [`${plan.migrationsTable}_lock`])).size > 0) {
    await knex.migrate.forceFreeMigrationsLock({ tableName: plan.migrationsTable, schemaName: legacy });
  }
}
