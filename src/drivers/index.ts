/**
 * Client adapters: each turns one kind of database handle into the SqlExecutor the dialect
 * statements run on. Which one a handle needs is told by duck typing, so idlease imports no
 * driver the user did not bring (postgres.js is an optional peer dependency).
 */
import { IdleaseError } from '../errors.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { isKnex, knexConnectionSettings, knexExecutor, type KnexLike } from './knex.js';
import { mysql2ConnectionSettings, mysql2Core, mysql2Executor } from './mysql2.js';
import { isPgPool, pgExecutor } from './pg.js';
import { isPostgresJs, postgresJsExecutor } from './postgres-js.js';

export { knexExecutor, type KnexLike };

/** What a call that takes "knex or a pool" accepts: a Knex instance or any pool poolExecutor accepts (told apart at run time). */
export type KnexOrPool = KnexLike | object;

export const ACCEPTED_POOLS =
  'a pg.Pool or pg.Client, a mysql2 pool, promise pool or connection (mysql2 or mysql2/promise), or a postgres.js `sql`';

/** The adapter for a raw pool; BAD_CONFIG naming what is accepted for anything else (knex has its own option). */
export function poolExecutor(pool: unknown, option = 'pool', accepted = ACCEPTED_POOLS): SqlExecutor {
  if (isPostgresJs(pool)) return postgresJsExecutor(pool);
  if (isPgPool(pool)) return pgExecutor(pool);
  const core = mysql2Core(pool);
  if (core) return mysql2Executor(core);
  throw new IdleaseError(
    'BAD_CONFIG',
    `${option} must be ${accepted}; got ${describe(pool)}.` + (isKnex(pool) ? ' For a Knex instance pass it as `knex` instead.' : ''),
  );
}

/** What a call that takes "knex or a pool" runs on: a Knex instance (a function with `raw`) or any pool poolExecutor accepts. */
export function executorFor(db: unknown, option = 'db'): SqlExecutor {
  return isKnex(db) ? knexExecutor(db) : poolExecutor(db, option, `a Knex instance, ${ACCEPTED_POOLS}`);
}

/**
 * Where and as whom a MySQL handle (knex on mysql2, a mysql2 pool, promise pool or connection)
 * connects, for sessions of idlease's own (mysql-sessions.ts); asked again for every session.
 */
export function mysqlSettingsOf(db: unknown, option = 'db'): () => Promise<Record<string, unknown>> {
  if (isKnex(db)) return knexConnectionSettings(db);
  const core = mysql2Core(db);
  if (!core)
    throw new IdleaseError(
      'BAD_CONFIG',
      `${option} must be a Knex instance on mysql2 or a mysql2 pool, promise pool or connection; got ${describe(db)}.`,
    );
  const settings = mysql2ConnectionSettings(core);
  return async () => settings;
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return `an object (${(x as object).constructor?.name ?? 'no constructor'})`;
  return typeof x === 'function' ? 'a function' : typeof x;
}
