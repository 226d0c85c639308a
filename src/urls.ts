/**
 * What a database URL names, without loading knex or a driver: the CLI reads these before it
 * knows whether it needs either (`idlease next` on the embedded default loads neither).
 */
import path from 'node:path';
import { IdleaseError } from './errors.js';

/** Where the embedded default database lives when no URL is given. */
export const DEFAULT_PGLITE_DIR = path.join('.idlease', 'pglite');

/**
 * Where a PGlite URL keeps its data: `{ dir }`, `{ dir: undefined }` for pglite:memory, or
 * undefined when the URL is not PGlite. Undefined URL → the embedded default directory.
 */
export function pgliteTarget(url: string | undefined): { dir: string | undefined } | undefined {
  if (url === undefined) return { dir: DEFAULT_PGLITE_DIR };
  // A URL's scheme is case-insensitive: PGLITE:x is pglite:x.
  if (!/^pglite:/i.test(url)) return undefined;
  const target = url.slice('pglite:'.length).replace(/^\/\//, '');
  if (target === 'memory') return { dir: undefined };
  if (target === '') {
    // An unset variable in a deploy script (`pglite:$DIR`) must not turn into a database that forgets every ID.
    throw new IdleaseError(
      'BAD_CONFIG',
      'The PGlite URL "pglite:" names no directory. Use pglite:<dir> (kept on disk), or leave the URL out for ./.idlease/pglite/ (pglite:memory keeps nothing once the process exits: it is for the library and serve, not for CLI commands).',
    );
  }
  return { dir: target };
}

/** Query parameters that carry a secret in a driver's URL (pg's `password`, `sslpassword`; mysql2's `password1`…). */
const SECRET_PARAMS = /^(password\d?|sslpassword|passphrase|token|auth)$/i;

/**
 * A URL fit for messages, logs and files: the password (and any secret query parameter)
 * replaced by `***`. It reads the URL with the parser the drivers read it with (WHATWG `URL`:
 * pg-connection-string, mysql2's `uri` and node-redis all use it), so a password holding `@`,
 * `:`, `/` or `%` is found where the driver finds it. A URL that parser refuses shows its
 * scheme and what follows its last `@`, never what precedes it: no driver connects with such
 * a URL, yet it may still hold a password typed unencoded.
 */
export function redact(url: string): string {
  if (url.startsWith('pglite:')) return url;
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  // `u:12/pw@h` parses as host u, port 12 and a path holding the rest: hide it as unparseable.
  if (parsed === undefined || (parsed.pathname + parsed.hash).includes('@')) {
    const scheme = /^[a-z][a-z0-9+.-]*:(\/\/)?/i.exec(url)?.[0] ?? '';
    const at = url.lastIndexOf('@');
    if (at < 0) return url.includes('?') ? `${url.slice(0, url.indexOf('?'))}?***` : url;
    const rest = url.slice(at + 1);
    return `${scheme}***@${rest.includes('?') ? `${rest.slice(0, rest.indexOf('?'))}?***` : rest}`;
  }
  if (parsed.password !== '') parsed.password = '***';
  for (const key of [...parsed.searchParams.keys()]) if (SECRET_PARAMS.test(key)) parsed.searchParams.set(key, '***');
  return parsed.toString();
}
