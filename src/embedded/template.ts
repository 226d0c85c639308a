/**
 * A new embedded directory unpacked from the template the package ships instead of made by
 * PGlite's initdb. initdb is most of a first run: seconds, and ~0.9 GB peak RSS, over a 512 MB
 * container; unpacking the ~4.5 MB archive takes a fraction of a second and little memory, and
 * the process then opens the directory as on any later run.
 *
 * What keeps this sound:
 * - The template is exactly what PGlite's initdb produces: `npm run build` makes it in a directory
 *   of its own, opens it once and closes it cleanly, no statement of idlease's ever run on it
 *   (scripts/build-pglite-template.mjs). It holds no tag, no table, no ID, and each new directory
 *   is its own copy, so no two directories share state.
 * - Only a directory that does not exist is made this way, and only under its lock (the caller
 *   holds it): an existing directory is never replaced, so none can go backwards.
 * - The directory appears by rename() of a complete copy: a crash leaves a stray `*.tmp-*` beside
 *   it, never a half-made directory under the real name.
 * - A template made by another PGlite release than the one installed (the dependency's range
 *   allows newer ones) is what an upgrade of PGlite meets anyway: a directory made by the older
 *   one. PostgreSQL refuses a data directory of another catalog version at startup; then the copy
 *   is removed (nothing was issued from it) and PGlite's initdb makes the directory, as before.
 *
 * IDLEASE_PGLITE_TEMPLATE=off makes every new directory by initdb; IDLEASE_PGLITE_TEMPLATE=<file>
 * unpacks another archive of the same shape.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { IdleaseError } from '../errors.js';
import { packageRoot } from '../package-root.js';

/** Where `npm run build` writes the template, relative to the package's root. */
export const TEMPLATE_ARCHIVE = 'dist/pglite-template.tar.gz';

/**
 * The archive new databases are unpacked from; undefined when turned off or not built (a checkout
 * before `npm run build`). Throws BAD_CONFIG when IDLEASE_PGLITE_TEMPLATE names a missing file.
 */
export function templateArchive(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const own = env.IDLEASE_PGLITE_TEMPLATE;
  // 0.2's switch for its per-user template cache, which this replaces: still a way to say "initdb".
  if (own === 'off' || env.IDLEASE_CACHE_DIR === 'off') return undefined;
  if (own !== undefined && own !== '') {
    if (fs.existsSync(own)) return path.resolve(own);
    throw new IdleaseError(
      'BAD_CONFIG',
      `IDLEASE_PGLITE_TEMPLATE names ${own}, which does not exist. Name a .tar.gz of a PGlite data directory, set it to off (initdb), or unset it (the template idlease ships).`,
    );
  }
  let file: string;
  try {
    file = fileURLToPath(new URL(TEMPLATE_ARCHIVE, packageRoot().dir));
  } catch {
    // idlease bundled into an app's own file: no package directory to ship a template in.
    return undefined;
  }
  return fs.existsSync(file) ? file : undefined;
}

function scratchName(target: string): string {
  return `${target}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * Unpack the archive into `to`, which must not exist. Streamed: the whole archive is never in
 * memory at once (holding it beside PGlite pushed a first run over 400 MB). tar keeps every entry
 * inside `to` and never applies the archive's owners.
 */
async function unpack(archive: string, to: string): Promise<void> {
  const tar = await import('tar');
  await fsp.mkdir(to, { mode: 0o700 });
  await tar.x({ file: archive, cwd: to, strict: true, preserveOwner: false });
  if (!fs.existsSync(path.join(to, 'PG_VERSION'))) throw new Error('the template has no PG_VERSION');
}

/**
 * Make `dir` from the template when it does not exist yet. Call only while holding the
 * directory's lock, before PGlite opens it. True when `dir` was made here (PGlite then finds
 * a database and does not run initdb); false leaves everything to PGlite. Never throws.
 */
export async function createFromTemplate(dir: string, archive: string): Promise<boolean> {
  const target = path.resolve(dir);
  const scratch = scratchName(target);
  try {
    if (fs.existsSync(target)) return false;
    await unpack(archive, scratch);
    // Not rename over anything: the lock keeps other idlease processes out, but not a user's mkdir.
    if (fs.existsSync(target)) return false;
    fs.renameSync(scratch, target);
    return true;
  } catch {
    return false;
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** Undo createFromTemplate when PGlite could not open the copy: nothing was issued from it yet. */
export function discardTemplateCopy(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
}
