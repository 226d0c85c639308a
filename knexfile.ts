/**
 * For `npx knex migrate:latest --knexfile knexfile.ts --env pglite|mysql|postgres`.
 * The migrations in ./migrations install idlease's default objects (on PostgreSQL/PGlite in
 * schema idlease, which they create) and record them in idlease's own table
 * (idlease_migrations), never in the app's knex_migrations. That table stays in the search
 * path: knex does not create the schema it would need for `schemaName: 'idlease'`.
 *
 *   pglite    embedded database in ./.idlease/pglite (the default elsewhere too)
 *   mysql     $IDLEASE_MYSQL_URL, default mysql://root@127.0.0.1:3306/test
 *   postgres  $IDLEASE_PG_URL,    default postgres://postgres@127.0.0.1:5432/test
 */
import type { Knex } from 'knex';
import { knexConfig } from './src/connect.js';

const migrations: Knex.MigratorConfig = {
  // What `idlease migrate` installs: the segment table and the install id. The rest, as with the
  // CLI's flags, on request: add './migrations/tickets', './migrations/next-id' or './migrations/workers'.
  directory: './migrations',
  tableName: 'idlease_migrations',
  loadExtensions: ['.ts', '.js'],
  // migrate() and `idlease migrate` record their steps in the same table under their own names.
  disableMigrationsListValidation: true,
};

// knexConfig() sets each driver up so no int8 becomes a JS number; the same config connect() uses.
const fromUrl = (url: string): Knex.Config => ({ ...knexConfig(url), migrations });

const config: Record<string, Knex.Config> = {
  pglite: fromUrl(process.env.IDLEASE_PGLITE_URL ?? 'pglite:.idlease/pglite'),
  mysql: fromUrl(process.env.IDLEASE_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test'),
  postgres: fromUrl(process.env.IDLEASE_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'),
};

export default config;
