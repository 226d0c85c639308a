/**
 * One process at a time on an embedded (PGlite) data directory.
 *
 * PGlite is Postgres compiled to WASM with no postmaster and no shared memory: two processes
 * that open one directory each keep their own buffers and overwrite each other's pages, which
 * repeated IDs and corrupted the store. So a directory is opened only under an exclusive lock
 * on `<dir>.lock`, held for as long as the database is open.
 *
 * The lock is the kernel's (Linux open-file-description locks, flock on macOS, LockFileEx on
 * Windows, through fs-native-extensions; Node has no flock of its own): it dies with the
 * process, so a holder killed with SIGKILL never blocks anyone, and there is no staleness
 * guess that a paused holder could lose. The file's text names the holder (pid, command, and
 * the URL of an `idlease serve` that holds it) for the messages of whoever waits.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { IdleaseError } from '../errors.js';
import { SYSTEM_CLOCK } from '../runtime/clock.js';
import { refuseForeignOwner } from './permissions.js';

// The one call used; the package ships no types. tryLock: an exclusive lock on `fd`, false when another holds it.
const fsx = createRequire(import.meta.url)('fs-native-extensions') as { tryLock(fd: number): boolean };

/** What the lock file says about its holder. Written by the holder, read by whoever waits. */
export interface LockHolder {
  readonly pid: number;
  /** What the holder runs, e.g. "idlease next order" or "node app.js". */
  readonly command: string;
  readonly since: string;
  /** Set by `idlease serve` once it listens: CLI commands that draw IDs go through it. */
  readonly serve?: {
    readonly url: string;
    /** A secret of that server's run (never its token): the CLI presents it to draw and create tags through the server. */
    readonly secret?: string;
    readonly table: string;
    readonly schema?: string;
    /** The server's largest /ids batch. */
    readonly maxBatch?: number;
  };
}

export interface DirectoryLock {
  readonly dir: string;
  readonly file: string;
  /** Rewrite what the lock file says about this holder (serve adds its URL). */
  announce(holder: Partial<LockHolder>): void;
  /** Give the directory up. Safe to call twice. */
  release(): void;
}

export interface AcquireOptions {
  /** How long to wait for another holder. Default 10,000 ms; 0 tries once. */
  readonly timeoutMs?: number;
  /**
   * Called with the holder while waiting; returning true stops the wait at once with
   * `undefined` (the CLI stops to go through a serve that holds the directory).
   */
  readonly stopWaiting?: (holder: LockHolder | undefined) => boolean;
  readonly command?: string;
}

export const DEFAULT_LOCK_TIMEOUT_MS = 10_000;
const POLL_MS = 50;

/** `<dir>.lock`, beside the directory: PGlite owns what is inside it. */
export function lockFileOf(dir: string): string {
  const absolute = path.resolve(dir);
  // The real parent, so two spellings of one directory (a symlink, ./x and x) meet on one file.
  let parent = path.dirname(absolute);
  try {
    parent = fs.realpathSync(parent);
  } catch {
    // The parent does not exist yet; the caller creates it before locking.
  }
  return path.join(parent, path.basename(absolute) + '.lock');
}

/** The holder the lock file names, if it names one that is still running. */
export function readHolder(dir: string): LockHolder | undefined {
  let text: string;
  try {
    text = fs.readFileSync(lockFileOf(dir), 'utf8');
  } catch {
    return undefined;
  }
  try {
    const holder = JSON.parse(text) as LockHolder;
    return typeof holder.pid === 'number' && isAlive(holder.pid) ? holder : undefined;
  } catch {
    // Mid-write, or emptied by a holder that just let go.
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Take the directory's lock, waiting up to `timeoutMs` for another holder; `DB_LOCKED` names
 * the holder when it does not let go in time, and at once when the holder is an `idlease serve`
 * (it holds the directory until stopped). Resolves `undefined` only when `stopWaiting` said so.
 */
export async function acquireDirectoryLock(dir: string, options: AcquireOptions = {}): Promise<DirectoryLock | undefined> {
  const file = lockFileOf(dir);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const timeoutMs = options.timeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const lock = tryLock(dir, file, options.command ?? defaultCommand());
    if (lock) return lock;
    const holder = readHolder(dir);
    if (options.stopWaiting?.(holder)) return undefined;
    // A serve holds the directory for as long as it runs: waiting for it only delays the same answer.
    if (holder?.serve !== undefined || Date.now() >= deadline) throw lockedError(dir, holder, timeoutMs);
    await SYSTEM_CLOCK.sleep(POLL_MS + Math.random() * POLL_MS);
  }
}

/**
 * Open the lock file without following a symlink (O_NOFOLLOW: `<dir>.lock → victim` would
 * otherwise have the victim truncated and rewritten), refuse it when another user owns it, and
 * make it the owner's only (0600), also when it was made before with a looser mode: it holds
 * the URL and run secret of a serve.
 */
function openLockFile(file: string): number {
  const nofollow = fs.constants.O_NOFOLLOW ?? 0;
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | nofollow, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOOP')
      throw new IdleaseError('BAD_CONFIG', `The lock file ${file} is a symbolic link: remove it (idlease makes its own).`, { cause: err });
    throw err;
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile())
      throw new IdleaseError('BAD_CONFIG', `The lock file ${file} is not a regular file: remove it (idlease makes its own).`);
    // Its owner could reopen it whatever mode it is given here, and read the run secret.
    refuseForeignOwner(file, stat, 'The lock file');
    if (process.platform !== 'win32' && (stat.mode & 0o777) !== 0o600) fs.fchmodSync(fd, 0o600);
  } catch (err) {
    fs.closeSync(fd);
    throw err;
  }
  return fd;
}

function tryLock(dir: string, file: string, command: string): DirectoryLock | undefined {
  const fd = openLockFile(file);
  let locked = false;
  try {
    locked = fsx.tryLock(fd);
  } finally {
    if (!locked) fs.closeSync(fd);
  }
  if (!locked) return undefined;
  let current: LockHolder = { pid: process.pid, command, since: new Date().toISOString() };
  const write = () => {
    const text = Buffer.from(JSON.stringify(current));
    fs.ftruncateSync(fd, 0);
    fs.writeSync(fd, text, 0, text.length, 0);
  };
  write();
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    process.removeListener('exit', release);
    try {
      // Say nothing of a holder that is gone; closing the descriptor is what lets go.
      fs.ftruncateSync(fd, 0);
    } finally {
      fs.closeSync(fd);
    }
  };
  // The kernel lets go at exit anyway; this only keeps the file from naming a dead pid.
  process.on('exit', release);
  return {
    dir,
    file,
    announce(holder) {
      if (released) return;
      current = { ...current, ...holder };
      write();
    },
    release,
  };
}

function defaultCommand(): string {
  const script = process.argv[1] ? path.basename(process.argv[1]) : '';
  const bin = /^(bin|idlease)(\.[cm]?[jt]s)?$/.test(script) ? 'idlease' : ['node', script].filter(Boolean).join(' ');
  // A library holder (`node app.js`, or just `node` for -e and a REPL) is found by where it runs.
  const where = bin === 'idlease' ? '' : ` (in ${process.cwd()})`;
  return ([bin, ...scrubArgs(process.argv.slice(2))].join(' ').slice(0, 200) + where).slice(0, 400);
}

/** Options whose value is a secret, or may carry one: their values never reach the lock file. */
const SECRET_OPTIONS = /^--(token|password|secret)/i;

/**
 * A URL in argv with everything between `//` and its last `@` hidden (user and password): cruder
 * than urls.ts's redact(), on purpose, so that this floor needs no URL parser and no password
 * spelling (unencoded `@`, `/`, `?` or `#`) survives. A query parameter whose name, once
 * percent-decoded (`pass%77ord`), speaks of a password, secret, token or key keeps no value.
 */
const hideUserinfo = (text: string): string =>
  text
    .replace(/^([a-z][a-z0-9+.-]*:\/\/).*@/is, '$1***@')
    .replace(/([?&#;])([^=&#;]*)=([^&#;]*)/g, (whole, sep: string, key: string) =>
      /pass|secret|token|auth|key/i.test(percentDecoded(key)) ? `${sep}${key}=***` : whole,
    );

function percentDecoded(text: string): string {
  try {
    return decodeURIComponent(text.replaceAll('+', ' '));
  } catch {
    return text;
  }
}

/** argv fit for the lock file: secret options' values replaced, URLs' user and password hidden. */
export function scrubArgs(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const eq = arg.indexOf('=');
    const name = eq < 0 ? arg : arg.slice(0, eq);
    if (SECRET_OPTIONS.test(name) && !/-file$/.test(name)) {
      if (eq >= 0) out.push(`${name}=***`);
      else {
        out.push(arg);
        if (i + 1 < args.length) {
          out.push('***');
          i++;
        }
      }
    } else
      out.push(
        arg.includes('://') ? (eq >= 0 && arg.startsWith('--') ? `${name}=${hideUserinfo(arg.slice(eq + 1))}` : hideUserinfo(arg)) : arg,
      );
  }
  return out;
}

function lockedError(dir: string, holder: LockHolder | undefined, timeoutMs: number): IdleaseError {
  if (holder?.serve) {
    return new IdleaseError(
      'DB_LOCKED',
      `The embedded database ${dir} is held by idlease serve (process ${holder.pid}, ${holder.serve.url}, since ${holder.since}). ` +
        '`idlease next` draws through it; this command needs the database itself: stop the server (kill -TERM ' +
        holder.pid +
        ') and rerun, or run both on a MySQL/PostgreSQL server (--url).',
    );
  }
  const who = holder ? `process ${holder.pid} (${JSON.stringify(holder.command)}, since ${holder.since})` : 'another process';
  return new IdleaseError(
    'DB_LOCKED',
    `The embedded database ${dir} is in use by ${who} and was not free within ${timeoutMs} ms. ` +
      'One process at a time opens a PGlite directory: rerun when it is done (or wait longer with --lock-wait), or stop it. ' +
      'To share one directory, run `idlease serve` on it (`idlease next` draws through the server) or use a MySQL/PostgreSQL server.',
  );
}
