import { IdleaseError } from '../errors.js';
import { redact } from '../urls.js';

/**
 * A PostgreSQL URL must name a database, as a MySQL one must (context.ts): without one, pg (like
 * libpq) connects to the database named like the user — `postgres`, the maintenance database,
 * for most URLs — and `migrate` would put idlease's tables there.
 */
export function refusePostgresWithoutDatabase(url: string): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return; // connect() says what is wrong with it
  }
  if (!/^postgres(ql)?:$/i.test(parsed.protocol) || parsed.pathname.replace(/^\/+/, '') !== '') return;
  if (parsed.searchParams.has('dbname') || parsed.searchParams.has('database')) return;
  const example = new URL(parsed.href);
  example.pathname = '/app';
  throw new IdleaseError(
    'BAD_CONFIG',
    `${redact(url)} names no database (PostgreSQL would use the one named like the user, often the maintenance database postgres): add one to the URL, e.g. ${redact(example.href)} (create it first: CREATE DATABASE app).`,
  );
}
