/**
 * Client adapters: each turns one kind of database handle into the SqlExecutor the dialect
 * statements run on. Which one a handle needs is told by duck typing, so idlease imports no
 * driver the user did not bring (postgres.js is an optional peer dependency).
 */
import { IdleaseError } from '../errors.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { knexExecutor } from './knex.js';
import { mysql2Core, mysql2Executor } from './mysql2.js';
import { isPgPool, pgExecutor } from './pg.js';
import { isPostgresJs, postgresJsExecutor } from './postgres-js.js';

export { knexExecutor };

export const ACCEPTED_POOLS = 'a pg.Pool or pg.Client, a mysql2 pool, promise pool or connection (mysql2 or mysql2/promise), or a postgres.js `sql`';

/** The adapter for a raw pool; BAD_CONFIG naming what is accepted for anything else (knex has its own option). */
export function poolExecutor(pool: unknown, option = 'pool'): SqlExecutor {
  if (isPostgresJs(pool)) return postgresJsExecutor(pool);
  if (isPgPool(pool)) return pgExecutor(pool);
  const core = mysql2Core(pool);
  if (core) return mysql2Executor(core);
  const knexLike = typeof pool === 'function' && typeof (pool as { raw?: unknown }).raw === 'function';
  throw new IdleaseError(
    'BAD_CONFIG',
    `${option} must be ${ACCEPTED_POOLS}; got ${describe(pool)}.` + (knexLike ? ' For a Knex instance pass it as `knex` instead.' : ''),
  );
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return `an object (${(x as object).constructor?.name ?? 'no constructor'})`;
  return typeof x === 'function' ? 'a function' : typeof x;
}
