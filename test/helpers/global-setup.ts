/**
 * Finds the real databases the suite runs against, in this order:
 *   1. IDLEASE_TEST_MYSQL_URL / IDLEASE_TEST_PG_URL when set;
 *   2. the local servers at 127.0.0.1:3306 (root, no password) and 127.0.0.1:5432 (postgres, trust);
 *   3. testcontainers (MariaDB 10.11, PostgreSQL 15) when a Docker engine is reachable.
 * Otherwise the run fails at once with a message naming all three. Nothing is skipped.
 */
import type { TestProject } from 'vitest/node';
import { connect, redact } from '../../src/connect.js';

declare module 'vitest' {
  export interface ProvidedContext {
    mysqlUrl: string;
    pgUrl: string;
  }
}

const LOCAL = { mysql: 'mysql://root@127.0.0.1:3306/test', pg: 'postgres://postgres@127.0.0.1:5432/test' } as const;

async function reachable(url: string): Promise<string | undefined> {
  const knex = connect(url, { poolMax: 1 });
  try {
    await Promise.race([
      knex.raw('select 1'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('timed out after 5 s')), 5000)),
    ]);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  } finally {
    void knex.destroy().catch(() => undefined);
  }
}

async function dockerAvailable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

export interface ResolveDeps {
  env: NodeJS.ProcessEnv;
  /** undefined when reachable, else why not. */
  probe(url: string): Promise<string | undefined>;
  dockerAvailable(): Promise<boolean>;
  /** Start containers for the missing kinds; returns their URLs and a stop function. */
  startContainers(kinds: Array<'mysql' | 'pg'>): Promise<{ urls: Partial<Record<'mysql' | 'pg', string>>; stop(): Promise<void> }>;
}

export interface ResolvedDatabases {
  mysqlUrl: string;
  pgUrl: string;
  stop(): Promise<void>;
}

/** The resolution order, apart from vitest so a unit test can drive it. */
export async function resolveDatabases(deps: ResolveDeps): Promise<ResolvedDatabases> {
  const problems: string[] = [];
  const resolved: Record<'mysql' | 'pg', string | undefined> = { mysql: undefined, pg: undefined };
  for (const kind of ['mysql', 'pg'] as const) {
    const envName = kind === 'mysql' ? 'IDLEASE_TEST_MYSQL_URL' : 'IDLEASE_TEST_PG_URL';
    const fromEnv = deps.env[envName];
    if (fromEnv) {
      const why = await deps.probe(fromEnv);
      if (why) throw new Error(`${envName}=${redact(fromEnv)} is set but not reachable: ${why}`);
      resolved[kind] = fromEnv;
      continue;
    }
    const why = await deps.probe(LOCAL[kind]);
    if (!why) {
      resolved[kind] = LOCAL[kind];
      continue;
    }
    problems.push(`${kind === 'mysql' ? 'MySQL/MariaDB' : 'PostgreSQL'} at ${LOCAL[kind]}: ${why}`);
  }
  let stop = async (): Promise<void> => undefined;
  const missing = (['mysql', 'pg'] as const).filter((k) => !resolved[k]);
  if (missing.length > 0 && (await deps.dockerAvailable())) {
    const started = await deps.startContainers(missing);
    Object.assign(resolved, started.urls);
    stop = started.stop;
  }
  if (!resolved.mysql || !resolved.pg) {
    await stop();
    throw new Error(
      [
        'idlease tests need a real MySQL/MariaDB and a real PostgreSQL; none is skipped.',
        ...problems.map((p) => `  - not reachable: ${p}`),
        '  - no Docker engine reachable for testcontainers',
        'Provide them one of three ways:',
        '  1. set IDLEASE_TEST_MYSQL_URL=mysql://user:pass@host:3306/db and IDLEASE_TEST_PG_URL=postgres://user@host:5432/db;',
        '  2. start the local servers: npm run db:up (installs MariaDB and PostgreSQL with apt-get if missing);',
        '  3. start a Docker engine, and testcontainers will run MariaDB 10.11 and PostgreSQL 15.',
      ].join('\n'),
    );
  }
  return { mysqlUrl: resolved.mysql, pgUrl: resolved.pg, stop };
}

async function startContainers(
  kinds: Array<'mysql' | 'pg'>,
): Promise<{ urls: Partial<Record<'mysql' | 'pg', string>>; stop(): Promise<void> }> {
  const stops: Array<() => Promise<unknown>> = [];
  const urls: Partial<Record<'mysql' | 'pg', string>> = {};
  if (kinds.includes('mysql')) {
    const { MariaDbContainer } = await import('@testcontainers/mariadb');
    const c = await new MariaDbContainer('mariadb:10.11').withUserPassword('root').withDatabase('test').start();
    stops.push(() => c.stop());
    urls.mysql = `mysql://root:root@${c.getHost()}:${c.getPort()}/test`;
  }
  if (kinds.includes('pg')) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const c = await new PostgreSqlContainer('postgres:15').withDatabase('test').start();
    stops.push(() => c.stop());
    urls.pg = c.getConnectionUri();
  }
  return {
    urls,
    stop: async () => {
      await Promise.all(stops.map((s) => s()));
    },
  };
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const dbs = await resolveDatabases({ env: process.env, probe: reachable, dockerAvailable, startContainers });
  project.provide('mysqlUrl', dbs.mysqlUrl);
  project.provide('pgUrl', dbs.pgUrl);
  return dbs.stop;
}
