/**
 * One fresh database per test file (so files run in parallel), on the servers the
 * global setup found. Call `drop()` in afterAll.
 */
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';

export type TestFlavor = 'mysql' | 'postgres' | 'pglite';

export interface TestDb {
  readonly flavor: TestFlavor;
  /** URL of this test database, for child processes and the CLI. */
  readonly url: string;
  readonly knex: Knex;
  /** A second knex handle on the same database (a separate pool), for "another process" cases. */
  another(): Knex;
  drop(): Promise<void>;
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = '/' + database;
  return u.toString();
}

export async function createTestDb(flavor: TestFlavor, label = 't'): Promise<TestDb> {
  const name = `idl_${label
    .replace(/[^a-z0-9_]/gi, '_')
    .toLowerCase()
    .slice(0, 30)}_${randomBytes(4).toString('hex')}`;
  if (flavor === 'pglite') {
    const knex = connect('pglite:memory');
    // pglite:memory is loaded from the shipped template, which carries idlease's default tables
    // (test/integration/cli-embedded-template.test.ts covers that): dropped here, so that every
    // flavor starts from an empty database, as CREATE DATABASE gives on the servers.
    await knex.raw('DROP SCHEMA IF EXISTS idlease CASCADE');
    return {
      flavor,
      url: 'pglite:memory',
      knex,
      another: () => {
        throw new Error('PGlite is a single in-process connection: there is no second handle');
      },
      drop: () => knex.destroy(),
    };
  }
  const serverUrl = flavor === 'mysql' ? inject('mysqlUrl') : inject('pgUrl');
  const admin = connect(serverUrl, { poolMax: 1 });
  await admin.raw(flavor === 'mysql' ? `CREATE DATABASE \`${name}\`` : `CREATE DATABASE "${name}"`);
  await admin.destroy();
  const url = withDatabase(serverUrl, name);
  const knex = connect(url, { poolMax: 8 });
  const others: Knex[] = [];
  return {
    flavor,
    url,
    knex,
    another: () => {
      const k = connect(url, { poolMax: 8 });
      others.push(k);
      return k;
    },
    async drop() {
      await Promise.all([knex, ...others].map((k) => k.destroy()));
      const a = connect(serverUrl, { poolMax: 1 });
      try {
        await a.raw(flavor === 'mysql' ? `DROP DATABASE IF EXISTS \`${name}\`` : `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await a.destroy();
      }
    },
  };
}

export const ALL_FLAVORS: readonly TestFlavor[] = ['mysql', 'postgres', 'pglite'];

/**
 * idlease's own tables: schema `idlease` on PostgreSQL/PGlite (where migrate puts them by
 * default), the connection's database on MySQL. `ownTable` is the quoted name for raw SQL.
 */
export function ownSchemaOf(flavor: TestFlavor): string | undefined {
  return flavor === 'mysql' ? undefined : 'idlease';
}

export function ownTable(flavor: TestFlavor, name: string): string {
  return flavor === 'mysql' ? '`' + name + '`' : `"idlease"."${name}"`;
}

export function ownSchemaBuilder(db: Pick<TestDb, 'flavor' | 'knex'>): Knex.SchemaBuilder {
  const schema = ownSchemaOf(db.flavor);
  return schema ? db.knex.schema.withSchema(schema) : db.knex.schema;
}
