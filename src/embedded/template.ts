/**
 * A new embedded directory unpacked from the template the package ships instead of made by
 * PGlite's initdb. initdb is most of a first run: seconds, and ~0.9 GB peak RSS, over a 512 MB
 * container; unpacking the ~4.5 MB archive takes a fraction of a second and ~40 MB, and
 * the process then opens the directory as on any later run.
 *
 * The template also carries idlease's own objects: `npm run build` runs PGlite's initdb in a
 * directory of its own, then the default `migrate` (what a first `idlease next <tag>` or
 * `idlease migrate` would run, knex's bookkeeping included), then closes it cleanly
 * (src/migrations/embedded-template.ts). A first run then finds the directory current, as a warm run does,
 * instead of running knex's migrator (~25 statements in WASM, half of a first run).
 *
 * What keeps this sound:
 * - The template holds no tag and no ID, and no install id (the id a Redis sequence's key is
 *   bound to: two databases must never share one). Its copies carry a marker file instead
 *   (INSTALL_ID_PENDING), and the first open of each copy, under the directory's lock and before
 *   anything else runs on it, writes a random install id and then removes the marker
 *   (writePendingInstallId): a crash between the two leaves the marker, and the write, which
 *   never replaces an id, runs again. Each new directory is its own copy, so no two share state.
 * - A template made by an older idlease (fewer migrations, or none: IDLEASE_PGLITE_TEMPLATE=<an
 *   older archive>) is a directory migrated by that release: `migrate` applies what is missing,
 *   as on any upgrade.
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
import { promisify } from 'node:util';
import { gunzip } from 'node:zlib';
import type { PGlite } from '@electric-sql/pglite';
import { DEFAULT_SCHEMA } from '../dialects/detect.js';
import { writeInstallId } from '../dialects/install.js';
import { isMissingTable } from '../dialects/missing-object.js';
import { pgliteExecutor } from '../drivers/pglite.js';
import { IdleaseError } from '../errors.js';
import { packageRoot } from '../package-root.js';

/** Where `npm run build` writes the template, relative to the package's root. */
export const TEMPLATE_ARCHIVE = 'dist/pglite-template.tar.gz';

/**
 * A file in the template's data directory (PostgreSQL ignores it), so in each copy until its
 * first open has written the copy's own install id. The template is migrated into the default
 * schema, where that id goes.
 */
export const INSTALL_ID_PENDING = 'idlease-install-id-pending';

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
 * Unpack the archive into `to`, which must not exist: directories and regular files only, every
 * name kept inside `to`, files written several at a time (a thousand small files one after
 * another are most of the time). The archive is read whole (~40 MB unpacked) before PGlite
 * starts: a first run still peaks far below 400 MB.
 */
async function unpack(archive: string, to: string): Promise<void> {
  const { parseTar } = await import('nanotar');
  const tar = await promisify(gunzip)(await fsp.readFile(archive));
  // parseTar reads `.buffer` from offset 0: hand it a view that starts there.
  const entries = parseTar(tar.byteOffset === 0 && tar.byteLength === tar.buffer.byteLength ? tar : new Uint8Array(tar));
  await fsp.mkdir(to, { mode: 0o700 });
  const files: { target: string; data: Uint8Array; mode: number }[] = [];
  for (const entry of entries) {
    const target = path.resolve(to, entry.name);
    if (target === to) continue;
    if (!target.startsWith(to + path.sep)) throw new Error(`template entry outside the directory: ${entry.name}`);
    const mode = Number.parseInt(entry.attrs?.mode ?? '', 8) & 0o777;
    if (entry.type === 'directory') await fsp.mkdir(target, { recursive: true, mode: mode || 0o700 });
    else if (entry.type === 'file') files.push({ target, data: entry.data ?? new Uint8Array(0), mode: mode || 0o600 });
    else throw new Error(`unexpected entry in the template: ${entry.name} (${String(entry.type)})`);
  }
  if (!files.some((f) => f.target === path.join(to, 'PG_VERSION'))) throw new Error('the template has no PG_VERSION');
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < files.length) {
      const { target, data, mode } = files[next++]!;
      await fsp.mkdir(path.dirname(target), { recursive: true });
      await fsp.writeFile(target, data, { flag: 'wx', mode });
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
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

/**
 * The first open of a copy of the template: write its own install id, then remove the marker.
 * Call right after PGlite opened `dir` under its lock. A directory without the marker (made by
 * initdb, or opened before) costs one stat. `dir` undefined is a memory database loaded from
 * the template: always a first open. A template without the install table (made by an older
 * idlease) is left to `migrate`, which creates the table with an id.
 */
export async function writePendingInstallId(db: PGlite, dir: string | undefined): Promise<void> {
  const marker = dir === undefined ? undefined : path.join(dir, INSTALL_ID_PENDING);
  if (marker !== undefined && !fs.existsSync(marker)) return;
  try {
    await writeInstallId(pgliteExecutor(db), DEFAULT_SCHEMA);
  } catch (err) {
    if (!isMissingTable(err)) throw err;
  }
  if (marker !== undefined) fs.rmSync(marker, { force: true });
}
