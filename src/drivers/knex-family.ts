/**
 * The driver hook for knex: which SQL family a knex handle's connections speak, read from its
 * client's name. The one place outside src/dialects/ that tests a family name (the structure
 * test names this file): which server it actually is, MariaDB or MySQL, PostgreSQL or
 * CockroachDB, is the engine's to learn from the server (dialects/engine.ts).
 */
import type { Flavor } from '../dialects/detect.js';
import { IdleaseError } from '../errors.js';

/** The SQL family a knex handle speaks, read from its client. */
export function knexFlavor(knex: { readonly client: unknown }): Flavor {
  const client = knex.client as { config?: { client?: unknown }; dialect?: string; pglite?: unknown };
  const configured = client.config?.client;
  const name =
    typeof configured === 'string' ? configured : typeof configured === 'function' ? ((configured as { name?: string }).name ?? '') : '';
  if (/pglite/i.test(name) || 'pglite' in client) return 'pglite';
  if (client.dialect === 'mysql' || /^(mysql2?|mariadb)$/i.test(name)) return 'mysql';
  if (client.dialect === 'postgresql' || /^(pg|postgres|postgresql)$/i.test(name)) return 'postgres';
  throw new IdleaseError(
    'BAD_CONFIG',
    `idlease supports knex clients 'mysql2', 'pg' and PGlite (knex-pglite); this knex uses ${JSON.stringify(name || client.dialect)}.`,
  );
}
