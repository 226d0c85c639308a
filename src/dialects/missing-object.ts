import { IdleaseError } from '../errors.js';
import type { SqlExecutor } from './sql.js';
import { isMissingTable } from './driver-errors.js';
import { currentSchemaExpr } from './flavor.js';

export { isMissingTable };

/** One catalog query, however the caller reaches the database: rows as arrays of values. */
export type CatalogQuery = (sql: string, values: readonly string[]) => Promise<unknown[][]>;

/** A CatalogQuery over an executor. */
export function executorCatalogQuery(db: SqlExecutor): CatalogQuery {
  return async (sql, values) => (await db.run(sql, values)).rows as unknown[][];
}

/**
 * Where an older idlease left `object` (a table or sequence name), if it did: the schema at the
 * head of the search path (usually public), when it holds that object and is not idlease's own
 * schema. PostgreSQL only, and only for the default schema (an explicit schema is the user's
 * choice); undefined whenever the lookup itself fails, since it only words a message.
 */
export async function olderInstallSchema(
  query: CatalogQuery,
  isPostgres: boolean,
  schemaGiven: boolean,
  ownSchema: string,
  object: string,
): Promise<string | undefined> {
  if (!isPostgres || schemaGiven) return undefined;
  try {
    const rows = await query(
      `SELECT ${currentSchemaExpr('postgres')} AS s FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace ` +
        `WHERE n.nspname = ${currentSchemaExpr('postgres')} AND c.relname = ?`,
      [object],
    );
    const found = rows[0]?.[0];
    return typeof found === 'string' && found !== ownSchema ? found : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A NOT_MIGRATED error: what is missing, then how to install it, in library and CLI words.
 * When an older idlease's install was found in the search path (`olderIn`), it says that this
 * migrate moves it into idlease's schema and how to keep it where it is instead; only then.
 */
export function notMigratedError(args: {
  what: string;
  /** The library call that installs it, e.g. `migrate(knex, { workers: true })`. */
  call: string;
  /** The `idlease migrate` flags that install it, e.g. `--no-segments --workers`. */
  flags: string;
  olderIn?: string;
  ownSchema?: string;
  cause?: unknown;
}): IdleaseError {
  const migrate = `migrate${args.flags ? ` ${args.flags}` : ''}`;
  const older = args.olderIn === undefined ? undefined : `An older idlease installed it in schema ${args.olderIn}: `;
  const lib = older
    ? ` ${older}migrate moves it, rows and all, into schema ${args.ownSchema}; to keep it where it is, pass schema: '${args.olderIn}' everywhere instead.`
    : '';
  const cli = older
    ? ` ${older}that migrate moves it, rows and all, into schema ${args.ownSchema}; to keep it where it is, pass --schema ${args.olderIn} to every command instead.`
    : '';
  return new IdleaseError('NOT_MIGRATED', `${args.what} Run ${args.call} (CLI: idlease ${migrate}) first.${lib}`, {
    cause: args.cause,
    cli: { message: `${args.what} Run \`{idlease} ${migrate}\` first.${cli}` },
  });
}

/**
 * Whether a table or sequence (quoted, qualified) exists, asked without touching it: on
 * PostgreSQL a failed statement aborts the transaction a migration runs in, so a down
 * migration's check must not find out by failing. MySQL: assumed (the caller reads it and
 * treats a missing table as empty, which does not abort anything there).
 */
export async function relationExists(query: CatalogQuery, isPostgres: boolean, quotedName: string): Promise<boolean> {
  if (!isPostgres) return true;
  const rows = await query('SELECT pg_catalog.to_regclass(?)::text AS r', [quotedName]);
  return rows[0]?.[0] != null;
}

/**
 * A table an older idlease made, missing a column this version's statements use: the upgrade's
 * migration has not run. Every statement on it would fail the same way, so it is NOT_MIGRATED.
 */
export function olderTableError(args: { table: string; call: string; flags: string; cause: unknown }): IdleaseError {
  return notMigratedError({
    what: `The table ${args.table} was made by an older idlease and lacks columns this version uses (${(args.cause as Error)?.message ?? 'a missing column'}).`,
    call: args.call,
    flags: args.flags,
    cause: args.cause,
  });
}
