/** The SQL family a handle speaks. PGlite speaks postgres but is one in-process connection. */
export type Flavor = 'mysql' | 'postgres' | 'pglite';

export function isPostgres(flavor: Flavor): flavor is 'postgres' | 'pglite' {
  return flavor !== 'mysql';
}

/** Quote an already-validated identifier for the flavor. */
export function quoteIdent(flavor: Flavor, ident: string): string {
  return flavor === 'mysql' ? '`' + ident + '`' : '"' + ident + '"';
}

export function qualified(flavor: Flavor, schema: string | undefined, name: string): string {
  return schema ? `${quoteIdent(flavor, schema)}.${quoteIdent(flavor, name)}` : quoteIdent(flavor, name);
}

/**
 * Where idlease's own tables live on PostgreSQL/PGlite when no schema is named: a schema of
 * their own, so tools that diff `public` against an app's models (drizzle-kit push, TypeORM
 * synchronize) never see them and never plan to drop them. On MySQL a schema is a database:
 * the connection's database is used unless one is named.
 */
export const DEFAULT_SCHEMA = 'idlease';

export function ownSchema(flavor: Flavor, schema: string | undefined): string | undefined {
  return schema ?? (isPostgres(flavor) ? DEFAULT_SCHEMA : undefined);
}

/**
 * The schema a user named, where a schema is a namespace inside the database (PostgreSQL): what
 * messages repeat as `--schema`. Undefined on MySQL, where the "schema" is the database itself.
 */
export function namedSchema(flavor: Flavor, schema: string | undefined): string | undefined {
  return isPostgres(flavor) ? schema : undefined;
}

/** An idlease table or sequence, quoted and qualified with its schema (ownSchema's default). */
export function ownObject(flavor: Flavor, schema: string | undefined, name: string): string {
  return qualified(flavor, ownSchema(flavor, schema), name);
}

/** The same name unquoted, for messages. */
export function ownObjectName(flavor: Flavor, schema: string | undefined, name: string): string {
  const s = ownSchema(flavor, schema);
  return s ? `${s}.${name}` : name;
}

/** DDL for a Postgres schema idlease installs into (validated identifier). */
export function createSchemaSql(flavor: Flavor, schema: string): string {
  return `CREATE SCHEMA IF NOT EXISTS ${quoteIdent(flavor, schema)}`;
}
