/**
 * A knex of idlease's own, opened where and as whom a pool the app already has connects.
 *
 * For the ticket allocator: on MySQL its draws set `auto_increment_increment/offset` on the
 * session, and a pooled connection carrying them would change the app's own AUTO_INCREMENT
 * inserts, so tickets are always drawn on connections of idlease's own. Given a pool instead
 * of knex, it copies the pool's connection settings; the app's pool itself is never used.
 */
import knexFactory, { type Knex } from 'knex';
import { IdleaseError } from '../errors.js';
import { isPgPool } from './pg.js';
import { isPostgresJs } from './postgres-js.js';
import { mysql2Core } from './mysql2.js';

/** Connection settings worth copying: where, as whom, over what. Driver tuning stays idlease's own. */
const MYSQL_KEYS = ['host', 'port', 'user', 'password', 'database', 'socketPath', 'ssl', 'charset', 'connectTimeout'] as const;
const PG_KEYS = ['host', 'port', 'user', 'password', 'database', 'connectionString', 'ssl'] as const;

export const PRIVATE_KNEX_POOLS = 'a mysql2 pool, promise pool or connection, a pg.Pool or pg.Client, or a postgres.js `sql`';

function pick(from: Record<string, unknown> | undefined, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of keys) if (from?.[k] !== undefined && from[k] !== null) out[k] = from[k];
  return out;
}

/** A new knex (at most `poolMax` connections, none opened until used) on the database `pool` reaches. The caller destroys it. */
export function privateKnexFor(pool: unknown, option: string, poolMax: number): Knex {
  const core = mysql2Core(pool) as { config?: { connectionConfig?: Record<string, unknown> } & Record<string, unknown> } | undefined;
  if (core) {
    // A pool keeps its connections' settings in config.connectionConfig; a connection in config.
    const settings = pick(core.config?.connectionConfig ?? core.config, MYSQL_KEYS);
    return knexFactory({
      client: 'mysql2',
      connection: { ...settings, supportBigNumbers: true, bigNumberStrings: true },
      pool: { min: 0, max: poolMax },
    });
  }
  if (isPgPool(pool)) {
    // pg.Pool keeps the options it was made with; pg.Client its parsed connectionParameters.
    const p = pool as unknown as { options?: Record<string, unknown>; connectionParameters?: Record<string, unknown> };
    const settings = pick(p.options ?? p.connectionParameters, PG_KEYS);
    return knexFactory({ client: 'pg', connection: settings, pool: { min: 0, max: poolMax } });
  }
  if (isPostgresJs(pool)) {
    const o = (pool as unknown as { options?: { host?: string[]; port?: number[]; user?: string; pass?: unknown; database?: string; ssl?: unknown } }).options ?? {};
    const settings = pick({ host: o.host?.[0], port: o.port?.[0], user: o.user, password: o.pass, database: o.database, ssl: o.ssl || undefined }, PG_KEYS);
    return knexFactory({ client: 'pg', connection: settings, pool: { min: 0, max: poolMax } });
  }
  throw new IdleaseError('BAD_CONFIG', `${option} must be ${PRIVATE_KNEX_POOLS}, or pass a Knex instance as knex instead.`);
}
