/**
 * Which server a connection reached, asked of the server (`VERSION()`, `version()`) rather than
 * guessed from the driver: mysql2 reaches MySQL as well as MariaDB, and `pg` reaches CockroachDB,
 * YugabyteDB or Redshift as well as PostgreSQL. idlease's MySQL-protocol SQL is MariaDB's
 * (SEQUENCE objects, `ADD COLUMN IF NOT EXISTS`, `@@global.wsrep_on`) and its PostgreSQL SQL reads
 * WAL functions and catalogs the others lack or answer differently, so a server that is not one
 * the tests run on is refused (engine.ts, on the first statement of every executor a driver makes)
 * with what it is, instead of half-installing and failing (or worse, running) later.
 */
import type { Flavor } from './detect.js';
import { perDialect } from './flavor.js';

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
