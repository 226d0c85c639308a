import type { Knex } from 'knex';
import { engineOf, type Engine } from '../dialects/engine.js';
import { currentSchema, ensureSchema, relationsIn } from '../dialects/relocate.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { knexExecutor } from '../drivers/knex.js';
import { IdleaseError } from '../errors.js';
import { planMigrations, type MigrateOptions } from './migrate.js';
import { objectsOfMigration } from './relocate.js';
import type { IdleaseMigration } from './types.js';

/**
 * Adapts the in-code migrations to knex migration files: each file names the objects it
 * installs, and the same builders run as in migrate() and `idlease migrate`. Objects a
 * flavor does not have (next_id() on MySQL) are a no-op there.
 */
export function knexFileMigration(options: Omit<MigrateOptions, 'direction' | 'lockTimeoutMs' | 'migrationsTable' | 'dropState'>): {
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
} {
  // The server says what it is before anything is planned on it (a server idlease is not tested on is refused).
  const plan = async (knex: Knex) => {
    const engine: Engine = await engineOf(knexExecutor(knex));
    const { nextId, ...rest } = options;
    // A knex migration file takes no options: IDLEASE_DROP_STATE=1 in the environment of
    // `knex migrate:down/rollback` is how its user says dropState. next_id() as a ticker needs
    // event_scheduler = ON, which a knexfile's database may not have: it is not installed there.
    const dropState = process.env.IDLEASE_DROP_STATE === '1';
    return planMigrations(engine, {
      segments: false,
      install: false,
      ...rest,
      dropState,
      ...(engine.nextId === 'ticker' ? {} : { nextId }),
    });
  };
  return {
    async up(knex) {
      const p = await plan(knex);
      if (p.schema !== undefined && p.engine.namespaces === 'schema') {
        const db = knexExecutor(knex);
        await ensureSchema(db, p.schema);
        await refuseBesideOlderInstall(db, p.schema, p.migrations);
      }
      for (const m of p.migrations) await m.up(knex);
    },
    async down(knex) {
      for (const m of [...(await plan(knex)).migrations].reverse()) await m.down(knex);
    },
  };
}

/**
 * next_id() from an app's own knex migration file, on either engine (docs/next-id.md):
 * `const m = nextIdKnexMigration({ shard: 5 }); export const up = m.up; export const down = m.down;`
 * Not a file in ./migrations: those run on every database a knexfile names, and on MariaDB
 * next_id() needs event_scheduler = ON, which an app that never asked for it may not have.
 */
export function nextIdKnexMigration(nextId: MigrateOptions['nextId'] = true): {
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
} {
  const plan = async (knex: Knex) => {
    const dropState = process.env.IDLEASE_DROP_STATE === '1';
    return planMigrations(await engineOf(knexExecutor(knex)), { segments: false, install: false, nextId, dropState }).migrations;
  };
  return {
    async up(knex) {
      for (const m of await plan(knex)) {
        await m.refuseUp?.(knex);
        await m.up(knex);
      }
    },
    async down(knex) {
      const list = await plan(knex);
      for (const m of list) await m.refuseDown?.(knex);
      for (const m of [...list].reverse()) await m.down(knex);
    },
  };
}

/**
 * The knex CLI reads its bookkeeping where the knexfile says, before any file runs, so a file
 * cannot move an older install the way migrate() does. Installing fresh tables beside it would
 * reissue segment IDs: refuse, and name the command that moves it.
 */
async function refuseBesideOlderInstall(db: SqlExecutor, schema: string, migrations: readonly IdleaseMigration[]): Promise<void> {
  const from = await currentSchema(db);
  if (from === undefined || from === schema) return;
  const names = migrations.flatMap((m) => objectsOfMigration(m.name));
  const old = await relationsIn(db, from, names);
  const here = await relationsIn(db, schema, names);
  const stranded = [...old.keys()].filter((n) => !here.has(n));
  if (stranded.length === 0) return;
  throw new IdleaseError(
    'MIGRATION_FAILED',
    `${stranded.map((n) => `${from}.${n}`).join(', ')} belong(s) to an install made by an older idlease, whose tables now live in schema ${schema}. ` +
      `Run \`idlease migrate\` (or migrate(knex)) once with the same database: it moves them, rows and all. Then rerun this migration.`,
  );
}
