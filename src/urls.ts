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
 * The `@`s of a URL after its scheme, and whether the parser the drivers use reads exactly
 * one of them as the end of a user and password. Any other `@` (a second one, or one the parser
 * leaves in the path, query or fragment) means a password typed unencoded: `u:ab@c/de@host`
 * connects to host `c`, `admin:1234?pw@host` to host `admin` port 1234, and the driver's own
 * errors then quote a piece of the password (`getaddrinfo ENOTFOUND c`).
 */
function strayAt(url: string): boolean {
  const start = /^[a-z][a-z0-9+.-]*:(\/\/)?/i.exec(url)?.[0].length ?? 0;
  const ats = url.slice(start).split('@').length - 1;
  if (ats === 0) return false;
  if (ats > 1) return true;
  try {
    const parsed = new URL(url);
    return (parsed.pathname + parsed.search + parsed.hash).includes('@');
  } catch {
    return true;
  }
}

/**
 * Refuse, before any connection, a URL whose user and password the drivers would not read as
 * typed (see strayAt): BAD_CONFIG showing only what follows its last `@`. Redis URLs and
 * pglite: pass.
 */
export function refuseStrayAt(url: string, what = 'database URL'): void {
  if (/^pglite:/i.test(url) || !strayAt(url)) return;
  throw new IdleaseError(
    'BAD_CONFIG',
    `The ${what} ${redact(url)} holds an @ that is not the one between password and host (a password typed unencoded): ` +
      'percent-encode the password: @ as %40, / as %2F, ? as %3F, # as %23, : as %3A, % as %25 ' +
      '(e.g. node -p "encodeURIComponent(process.argv[1])" \'<password>\').',
  );
}

/**
 * A URL fit for messages, logs and files: the password (and any secret query parameter)
 * replaced by `***`. It reads the URL with the parser the drivers read it with (WHATWG `URL`:
 * pg-connection-string, mysql2's `uri` and node-redis all use it), so a password holding an
 * encoded `@`, `:`, `/` or `%` is found where the driver finds it. A URL that parser refuses,
 * or one with an `@` it does not read as the end of the password (`u:12?pw@h`, `u::?pw@h`,
 * `u:a@b/c@h`: a password typed unencoded), shows its scheme and what follows its last `@`,
 * never what precedes it: such a URL may hold a password whatever the parser makes of it.
 */
export function redact(url: string): string {
  if (/^pglite:/i.test(url)) return url;
  let parsed: URL | undefined;
  try {
    parsed = strayAt(url) ? undefined : new URL(url);
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined) {
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
