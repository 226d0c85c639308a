/**
 * Which server a connection reached, asked of the server (`VERSION()`, `version()`) rather than
 * guessed from the driver: mysql2 reaches MySQL as well as MariaDB, and `pg` reaches CockroachDB,
 * YugabyteDB or Redshift as well as PostgreSQL. idlease's MySQL-protocol SQL is MariaDB's
 * (SEQUENCE objects, `ADD COLUMN IF NOT EXISTS`, `@@global.wsrep_on`) and its PostgreSQL SQL reads
 * WAL functions and catalogs the others lack or answer differently, so a server that is not one
 * the tests run on is refused at migrate and by the knex migration files — the step every install
 * goes through — with what it is, instead of half-installing and failing (or worse, running) later.
 */
import { IdleaseError } from '../errors.js';
import type { Flavor } from './detect.js';
import { perDialect, type PerDialect } from './flavor.js';
import type { SqlExecutor } from './sql.js';

const VERSION_SQL: PerDialect<string> = { mysql: 'SELECT VERSION()', postgres: 'SELECT version()' };

/** Why a server with this version string is refused, or undefined for one idlease is tested on. Pure. */
export function untestedServer(flavor: Flavor, version: string): string | undefined {
  if (perDialect(flavor, { mysql: true, postgres: false })) {
    if (/mariadb/i.test(version)) return undefined;
    return `this server is not MariaDB (VERSION() says '${version}': MySQL or a fork). idlease's MySQL-protocol SQL is MariaDB's (SEQUENCE objects, ADD COLUMN IF NOT EXISTS, the Galera variables) and is tested on MariaDB 10.11 only: use MariaDB 10.6 or later`;
  }
  if (/cockroach|yugabyte|-YB-|redshift|greenplum|aurora dsql/i.test(version) || !/^PostgreSQL \d/.test(version)) {
    return `this server is not PostgreSQL (version() says '${version}'). idlease's PostgreSQL SQL reads the WAL timeline and catalogs that PostgreSQL-compatible servers lack or answer differently, and is tested on PostgreSQL and PGlite only`;
  }
  return undefined;
}

/** BAD_CONFIG naming the server when it is not one idlease is tested on. One round trip. */
export async function refuseUntestedServer(db: SqlExecutor): Promise<void> {
  const version = String((await db.run(perDialect(db.flavor, VERSION_SQL), [])).rows[0]?.[0] ?? '');
  const why = untestedServer(db.flavor, version);
  if (why !== undefined) throw new IdleaseError('BAD_CONFIG', `idlease migrate refused: ${why}.`);
}
