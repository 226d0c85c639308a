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
      'The PGlite URL "pglite:" names no directory. Use pglite:<dir> (kept on disk) or, for a throwaway database, pglite:memory.',
    );
  }
  return { dir: target };
}

/** A URL fit for messages and logs: the password replaced. */
export function redact(url: string): string {
  return url.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
}
