import type { PGlite, PGliteOptions } from '@electric-sql/pglite';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { PGliteArtifacts } from './preload.js';
import { tightenDataDir } from './permissions.js';
import { createFromTemplate, discardTemplateCopy, templateArchive, writePendingInstallId } from './template.js';

export interface OpenedEmbedded {
  readonly db: PGlite;
  /** True when there was no database before this call: IDs from it start at 1. */
  readonly isNew: boolean;
}

/**
 * PostgreSQL's 128 MB of shared buffers are touched when it starts: ~140 MB of RSS, a third of
 * the process, for tables of a few rows. 16 MB keeps every idlease table and index in memory many
 * times over. Passed at each start, never written into the directory's postgresql.conf.
 */
export const EMBEDDED_SHARED_BUFFERS = '16MB';

/**
 * Open an embedded database: a data directory (the caller holds its lock, ./lock.ts) or, with
 * `dir` undefined, one in memory. A database that does not exist yet is made from the shipped
 * template (./template.ts), else by PGlite's initdb; a copy of the template gets its own install
 * id on its first open, before the caller can use it. `artifacts` may still be compiling
 * (preload.ts): a new directory is unpacked meanwhile, on the other core. The directory and
 * everything in it are the owner's only once open (./permissions.ts).
 */
export async function openEmbedded(
  dir: string | undefined,
  artifacts?: PGliteArtifacts | Promise<PGliteArtifacts | undefined>,
): Promise<OpenedEmbedded> {
  const archive = templateArchive();
  const isNew = dir === undefined || !existsSync(path.join(dir, 'PG_VERSION'));
  const made = dir !== undefined && archive !== undefined ? createFromTemplate(dir, archive) : Promise.resolve(false);
  const [{ PGlite }, compiled, fromTemplate] = await Promise.all([import('@electric-sql/pglite'), artifacts, made]);
  const options: PGliteOptions = {
    ...compiled,
    startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${EMBEDDED_SHARED_BUFFERS}`],
  };
  const open = async (extra: PGliteOptions = {}) => {
    const opening = dir === undefined ? new PGlite({ ...options, ...extra }) : new PGlite(dir, { ...options, ...extra });
    await opening.waitReady;
    return opening;
  };
  if (dir === undefined) {
    if (archive === undefined) return { db: await open(), isNew };
    const loadDataDir = new Blob([await readFile(archive)]);
    // A template the installed PGlite does not open: initdb, as without one.
    const db = await open({ loadDataDir }).catch(() => undefined);
    if (db === undefined) return { db: await open(), isNew };
    // The template carries idlease's tables but no install id: this database's own, before any use.
    await closedOnError(db, () => writePendingInstallId(db, undefined));
    return { db, isNew };
  }
  // A directory someone made before (mkdir -p, a volume) is closed to others before PGlite writes into it.
  const wasOpen = tightenDataDir(dir, false);
  const db = !fromTemplate
    ? await open()
    : await open().catch(() => {
        // A copy the installed PGlite does not open: nothing was issued from it; make it by initdb.
        discardTemplateCopy(dir);
        return open();
      });
  await closedOnError(db, async () => {
    // What initdb wrote (0666), or anything in a directory that was open to others: the owner's
    // only. A directory that was 0700 kept everyone else out, whatever the modes inside
    // (PGlite writes new WAL segments 0666 too): then the ~1,000 entries are not walked again.
    tightenDataDir(dir, isNew || wasOpen);
    // A copy of the template gets its own install id on its first open (a marker says so; one stat otherwise).
    await writePendingInstallId(db, dir);
  });
  return { db, isNew };
}

async function closedOnError(db: PGlite, work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (err) {
    await db.close();
    throw err;
  }
}
