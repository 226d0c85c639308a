/**
 * A new embedded directory made by copying a template instead of by PGlite's initdb. initdb is
 * most of a first run (seconds, and ~0.9 GB peak RSS); copying a ~40 MB directory is a fraction
 * of a second, and the process then opens the directory as on any later run.
 *
 * What keeps this sound:
 * - The template is exactly what PGlite's initdb produces: made in a directory of its own,
 *   opened once and closed cleanly, no statement of idlease's ever run on it. It holds no tag,
 *   no table, no ID; each new directory gets its own copy (copied, never linked), so no two
 *   directories share state.
 * - Only a directory that does not exist is made this way, and only under its lock (the
 *   caller holds it): an existing directory is never replaced, so none can go backwards.
 * - Both the template and the new directory appear by rename() of a complete copy: a crash
 *   leaves a stray `*.tmp-*` beside them, never a half-made directory under the real name.
 * - The template is keyed by PGlite's version (the data directory's format is the Postgres
 *   major version PGlite bundles). Anything unusual — no cache directory, no space, another
 *   version — falls back to PGlite's own initdb, as before.
 *
 * Where: $IDLEASE_CACHE_DIR, else $XDG_CACHE_HOME/idlease, else ~/.cache/idlease (one template
 * per PGlite version, ~40 MB). IDLEASE_CACHE_DIR=off makes every new directory by initdb.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import type { PGliteArtifacts } from './preload.js';

/** Where templates live; undefined when caching is off or there is no home to keep them in. */
export function templateCacheDir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const own = env.IDLEASE_CACHE_DIR;
  if (own !== undefined && own !== '') return own === 'off' ? undefined : path.resolve(own);
  if (env.XDG_CACHE_HOME) return path.join(path.resolve(env.XDG_CACHE_HOME), 'idlease');
  const home = os.homedir();
  return home ? path.join(home, '.cache', 'idlease') : undefined;
}

function pgliteVersion(): string | undefined {
  const entry = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  // dist/index.(c)js → the package's own package.json
  const pkg = JSON.parse(fs.readFileSync(path.join(path.dirname(entry), '..', 'package.json'), 'utf8')) as {
    name?: string;
    version?: string;
  };
  return pkg.name === '@electric-sql/pglite' && typeof pkg.version === 'string' ? pkg.version : undefined;
}

function scratchName(target: string): string {
  return `${target}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/** The template directory, made now if missing; undefined when none can be had. */
async function template(cacheDir: string, artifacts: PGliteArtifacts | undefined): Promise<string | undefined> {
  const version = pgliteVersion();
  if (version === undefined) return undefined;
  const dir = path.join(cacheDir, `pglite-${version}`);
  if (fs.existsSync(path.join(dir, 'PG_VERSION'))) return dir;
  fs.mkdirSync(cacheDir, { recursive: true, mode: 0o700 });
  const scratch = scratchName(dir);
  try {
    const { PGlite } = await import('@electric-sql/pglite');
    const db = new PGlite(scratch, { ...artifacts });
    await db.waitReady;
    await db.close();
    try {
      fs.renameSync(scratch, dir);
    } catch (err) {
      // Another process published one first: theirs is as good as ours.
      if (!fs.existsSync(path.join(dir, 'PG_VERSION'))) throw err;
    }
    return dir;
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * Copy a directory tree file by file, several files at a time (fs.cpSync copies ~1,000 files
 * one after another: most of a first run). Each file is a copy of its own — a reflink where the
 * filesystem has them (copy-on-write), bytes otherwise — never a link to the template's file.
 */
async function copyTree(from: string, to: string): Promise<void> {
  const files: string[] = [];
  const walk = async (rel: string): Promise<void> => {
    await fsp.mkdir(path.join(to, rel));
    for (const entry of await fsp.readdir(path.join(from, rel), { withFileTypes: true })) {
      const child = path.join(rel, entry.name);
      if (entry.isDirectory()) await walk(child);
      else if (entry.isFile()) files.push(child);
      else throw new Error(`unexpected entry in the template: ${child}`);
    }
  };
  await walk('');
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < files.length) {
      const file = files[next++]!;
      await fsp.copyFile(path.join(from, file), path.join(to, file), fs.constants.COPYFILE_FICLONE);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

/**
 * Make `dir` from the template when it does not exist yet. Call only while holding the
 * directory's lock, before PGlite opens it. True when `dir` was made here (PGlite then finds
 * a database and does not run initdb); false leaves everything to PGlite. Never throws.
 */
export async function createFromTemplate(dir: string, artifacts?: PGliteArtifacts): Promise<boolean> {
  const target = path.resolve(dir);
  const scratch = scratchName(target);
  try {
    if (fs.existsSync(target)) return false;
    const cacheDir = templateCacheDir();
    if (cacheDir === undefined) return false;
    const source = await template(cacheDir, artifacts);
    if (source === undefined) return false;
    await copyTree(source, scratch);
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

/** Undo createFromTemplate when PGlite could not open the copy (a damaged template): nothing was issued from it yet. */
export function discardTemplateCopy(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
  const cacheDir = templateCacheDir();
  const version = cacheDir === undefined ? undefined : pgliteVersion();
  if (cacheDir !== undefined && version !== undefined)
    fs.rmSync(path.join(cacheDir, `pglite-${version}`), { recursive: true, force: true });
}
