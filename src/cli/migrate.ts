import type { Command } from 'commander';
import { IdleaseError } from '../errors.js';
import type { ConnectedKnex } from '../connect.js';
import { engineOf } from '../dialects/engine.js';
import { appliedMigrationNames } from '../dialects/migrations.js';
import { knexExecutor } from '../drivers/knex.js';
import { migrate, planMigrations, unlockMigrations, type MigrateOptions } from '../migrations/migrate.js';
import { describeTarget, print, withKnex } from './context.js';

interface MigrateFlags {
  schema?: string;
  segments: boolean;
  segmentsTable?: string;
  down?: boolean;
  dropState?: boolean;
  unlock?: boolean;
}

/** Options that other commands' modules add to `idlease migrate` (tickets, next_id). */
export type MigrateFlagContributor = {
  configure(cmd: Command): void;
  toOptions(flags: Record<string, unknown>): Partial<MigrateOptions>;
};

export function registerMigrate(program: Command, contributors: MigrateFlagContributor[]): void {
  const cmd = program
    .command('migrate')
    .description('install idlease objects (segment table by default; tickets and next_id() on request), or remove them with --down')
    .option(
      '--schema <name>',
      "PostgreSQL schema for idlease's tables and its migrations table (default idlease, created if missing; an older install found in the search path is moved there; public keeps it where it is)",
    )
    .option('--no-segments', 'leave out the segment table')
    .option('--segments-table <name>', 'segment table name', 'idlease_segments')
    .option('--workers', 'install the worker-id lease table of snowflake allocators')
    .option('--workers-table <name>', 'worker table name (default idlease_workers)')
    .option('--down', 'remove the objects named by the other flags instead of installing them')
    .option(
      '--drop-state',
      'with --down: also drop segment rows that have handed out IDs, ticket counters that have issued tickets and live worker-id leases (refused without it)',
    )
    .option('--unlock', 'free a migration lock left behind by a crashed migration, then exit')
    .addHelpText(
      'after',
      `
Examples:
  idlease migrate                                   segment table in the embedded PGlite (./.idlease/)
  idlease migrate --url mysql://root@127.0.0.1/app  the same on MySQL/MariaDB
  idlease migrate --down                            remove the segment table (refused while tags hold IDs: --drop-state)
  idlease migrate --workers                         also the worker-id table of snowflake allocators
  idlease --url postgres://… migrate --schema public  keep the tables where idlease 0.1 put them`,
    );
  for (const c of contributors) c.configure(cmd);
  cmd.action(async (flags: MigrateFlags & Record<string, unknown>, self: Command) => {
    // Flags are checked before the database is opened: a refused flag creates nothing.
    let options: MigrateOptions = {
      schema: flags.schema,
      segments: flags.segments ? { table: flags.segmentsTable } : false,
      direction: flags.down ? 'down' : 'up',
      ...(flags.dropState === true ? { dropState: true } : {}),
      ...(flags.workers === true || flags.workersTable !== undefined
        ? { workers: flags.workersTable === undefined ? true : { table: flags.workersTable as string } }
        : {}),
    };
    if (flags.dropState === true && !flags.down) throw new IdleaseError('BAD_CONFIG', '--drop-state applies only with --down.');
    for (const c of contributors) options = { ...options, ...c.toOptions(flags) };
    await withKnex(self, async (knex) => {
      if (flags.unlock) {
        await unlockMigrations(knex, { schema: flags.schema });
        print(self, 'migration lock freed', { unlocked: true });
        return;
      }
      const nothing = `nothing to do on ${describeTarget(self)}: already ${options.direction === 'down' ? 'removed' : 'up to date'}`;
      if (options.direction === 'down' && !(await idleaseWasHere(knex, options))) {
        // Nothing of idlease's is here: answer without creating its schema and bookkeeping first.
        print(self, nothing, { applied: [], moved: [], direction: 'down' });
        return;
      }
      const result = await migrate(knex, options);
      const verb = result.direction === 'up' ? 'applied' : 'reverted';
      print(
        self,
        result.applied.length === 0 && result.moved.length === 0
          ? nothing
          : [...result.moved.map((m) => `moved ${m.from} to ${m.to}`), ...result.applied.map((n) => `${verb} ${n}`)],
        result,
      );
    });
  });
}

/** Whether idlease's bookkeeping exists: in its schema, or (PostgreSQL) an older install's in the search path. */
async function idleaseWasHere(knex: ConnectedKnex, options: MigrateOptions): Promise<boolean> {
  const db = knexExecutor(knex);
  const plan = planMigrations(await engineOf(db), options);
  if ((await appliedMigrationNames(db, plan.schema, plan.migrationsTable)) !== undefined) return true;
  return plan.schema !== undefined && (await appliedMigrationNames(db, undefined, plan.migrationsTable)) !== undefined;
}
