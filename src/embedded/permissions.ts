/**
 * An embedded database is its owner's only. PGlite's initdb (WASM, Emscripten's NODEFS) writes
 * its files 0666 whatever the umask, and a data directory made before the first run (`mkdir -p`,
 * a Docker or Kubernetes volume) skips the template, which is unpacked 0700/0600: another local
 * user could then overwrite `global/pg_control` or the WAL and make IDs repeat. So on every
 * open the directory is made 0700, and everything in it 0600 (directories 0700) when it is new
 * or was found open to others (inside a 0700 directory no one else reaches a file, whatever
 * its mode, and a walk of ~1,000 entries costs a warm `next` tens of ms); a lock file that another user owns is refused: that user could chmod it back
 * and read the run secret a serve writes into it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { IdleaseError } from '../errors.js';

const POSIX = process.platform !== 'win32' && typeof process.geteuid === 'function';

/** A user id as `name (uid N)`, the name read from /etc/passwd when it has one. */
export function describeUser(uid: number): string {
  try {
    for (const line of fs.readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const [name, , id] = line.split(':');
      if (id === String(uid) && name) return `${name} (uid ${uid})`;
    }
  } catch {
    // No passwd file (a minimal container): the number alone.
  }
  return `uid ${uid}`;
}

/**
 * Refuse a file another user owns (BAD_CONFIG naming the owner). root included: a file another
 * user owns, that user can still reopen and read whatever mode root gives it.
 */
export function refuseForeignOwner(file: string, stat: fs.Stats, what: string): void {
  if (!POSIX) return;
  const me = process.geteuid!();
  if (stat.uid === me) return;
  throw new IdleaseError(
    'BAD_CONFIG',
    `${what} ${file} belongs to ${describeUser(stat.uid)}, not to ${describeUser(me)}: another user made it and could read or change it. ` +
      `Remove it if you trust that directory (rm ${file}), or use a directory only you can write to.`,
  );
}

/**
 * Make `dir` 0700 and, with `deep`, every directory in it 0700 and every file 0600 (symbolic
 * links are left alone, never followed). Only what is looser is changed. A directory this user
 * cannot chmod (another user's) is BAD_CONFIG naming its owner. True when `dir` itself was open
 * to others: then what is inside may have been reached, and the caller goes deep.
 */
export function tightenDataDir(dir: string, deep: boolean): boolean {
  if (!POSIX) return false;
  const tighten = (p: string, stat: fs.Stats): boolean => {
    const wanted = stat.isDirectory() ? 0o700 : 0o600;
    if ((stat.mode & 0o777 & ~wanted) === 0) return false;
    try {
      fs.chmodSync(p, stat.mode & 0o777 & wanted);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EPERM') throw err;
      refuseForeignOwner(p, stat, 'The embedded database file');
      throw err;
    }
    return true;
  };
  let top: fs.Stats;
  try {
    top = fs.lstatSync(dir);
  } catch {
    return false; // not made yet: PGlite or the template makes it, and the next call tightens it
  }
  if (!top.isDirectory()) return false; // PGlite says what is wrong with it
  const wasOpen = tighten(dir, top);
  if (!deep) return wasOpen;
  const walk = (at: string): void => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      if (entry.isSymbolicLink()) continue;
      const p = path.join(at, entry.name);
      tighten(p, fs.lstatSync(p));
      if (entry.isDirectory()) walk(p);
    }
  };
  walk(dir);
  return wasOpen;
}
