import { existsSync } from 'node:fs';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import type { PGlite } from '@electric-sql/pglite';
import type { ConnectedKnex } from '../connect.js';
// knex, knex-pglite and the drivers are imported where a command opens its database, not here:
// `idlease next` on the embedded default runs on PGlite alone (withPGlite) and never loads them.
import { DEFAULT_PGLITE_DIR, pgliteTarget, readDatabaseUrl, redact, refuseNoDatabase, serverProtocol } from '../urls.js';
import { preloadedPGlite } from '../embedded/preload.js';
import { openEmbedded } from '../embedded/open.js';
import { acquireDirectoryLock, DEFAULT_LOCK_TIMEOUT_MS, type DirectoryLock, type LockHolder } from '../embedded/lock.js';
import { connectionErrorWithin, connectionProblem, describeConnectionProblem, isConfigProblem } from '../dialects/connection-errors.js';
import { knexExecutor, type KnexLike } from '../drivers/knex.js';
import { IdleaseError } from '../errors.js';
import { shellWord } from '../shell.js';
import { settlesWithin } from '../runtime/deadline.js';
import { isForeignProtocolAnswer, postgresAnswersAt, wrongServerMessage } from './wrong-server.js';

export interface GlobalOptions {
  url?: string;
  json?: boolean;
  verbose?: boolean;
  lockWait?: number;
  wait?: number;
}

/** How long a command waits for a database that does not answer (`--wait`, seconds; default 5). */
export const DEFAULT_WAIT_MS = 5000;

export function waitMs(cmd: Command): number {
  return globals(cmd).wait ?? DEFAULT_WAIT_MS;
}

/** The options every command inherits (`--url`, `--json`), read from the root program. */
export function globals(cmd: Command): GlobalOptions {
  return cmd.optsWithGlobals<GlobalOptions>();
}

/** A knex handle for a CLI command: knex's own log lines (stack traces included) only with --verbose. */
export async function openDatabase(cmd: Command, url: string | undefined, poolMax?: number): Promise<ConnectedKnex> {
  if (url !== undefined) refuseNoDatabase(readDatabaseUrl(url));
  else refuseSecondDefault(cmd, DEFAULT_PGLITE_DIR);
  const dir = pgliteTarget(url)?.dir;
  if (dir !== undefined && !existsSync(path.join(dir, 'PG_VERSION'))) announceNewDatabase(cmd, dir);
  const { connect } = await import('../connect.js');
  // The CLI's embedded default, asked for by name: the library itself never picks a database.
  return connect(url ?? `pglite:${DEFAULT_PGLITE_DIR}`, {
    poolMax,
    connectTimeoutMs: waitMs(cmd),
    log: cliLog(cmd),
    lockTimeoutMs: globals(cmd).lockWait,
  });
}

/**
 * The embedded default is `./.idlease/` in the directory idlease runs in. Run from a
 * subdirectory of a project (`cd src && npx idlease next order`) it would silently make a second
 * database whose IDs start at 1 again and repeat the project's. So when no URL is given, there is
 * no database here yet, and the project above holds one — looked for up to the project's root,
 * the nearest directory above with a package.json or .git, never beyond — the command is refused
 * (BAD_CONFIG) naming it: run from there, or name a directory with --url. Outside a project
 * nothing is looked for.
 */
export function refuseSecondDefault(cmd: Command, dir: string, cwd = process.cwd()): void {
  if (targetUrl(cmd) !== undefined || path.resolve(dir) !== path.resolve(cwd, DEFAULT_PGLITE_DIR)) return;
  if (existsSync(path.join(cwd, DEFAULT_PGLITE_DIR, 'PG_VERSION'))) return;
  const isRoot = (at: string) => existsSync(path.join(at, 'package.json')) || existsSync(path.join(at, '.git'));
  if (isRoot(cwd)) return;
  const ancestors: string[] = [];
  for (let at = path.dirname(cwd); ; at = path.dirname(at)) {
    ancestors.push(at);
    if (isRoot(at)) break;
    if (path.dirname(at) === at) return; // not inside a project
  }
  const found = ancestors.find((at) => existsSync(path.join(at, DEFAULT_PGLITE_DIR, 'PG_VERSION')));
  if (found === undefined) return;
  const theirs = path.join(found, DEFAULT_PGLITE_DIR);
  throw new IdleaseError(
    'BAD_CONFIG',
    `There is no embedded database in ./${DEFAULT_PGLITE_DIR}/ here, but the project's is in ${theirs}/: a new one here would repeat its IDs. ` +
      `Run idlease from ${found}, or name it: --url ${shellWord(`pglite:${theirs}`)} (a new one here: --url pglite:${DEFAULT_PGLITE_DIR}).`,
  );
}

function cliLog(cmd: Command): (line: string) => void {
  const verbose = globals(cmd).verbose === true;
  return (line) => {
    if (verbose) process.stderr.write(line + '\n');
  };
}

/**
 * How the user ran idlease, for commands in hints: `npx idlease` when npx (npm exec) ran an
 * installed copy (an app has no `idlease` on its PATH), else `idlease`. Both are checked: a
 * process started under `npx something-else` inherits npm_command too.
 */
export function programName(env: NodeJS.ProcessEnv = process.env, script: string = process.argv[1] ?? ''): string {
  return env.npm_command === 'exec' && /[\\/]node_modules[\\/]/.test(script) ? 'npx idlease' : 'idlease';
}

/** Where a command's database URL came from: the flag, or one of the environment variables it reads, in this order. */
export type UrlSource = '--url' | 'IDLEASE_URL' | 'DATABASE_URL';

/** The environment variables read for the URL when --url is not given, first one set wins. */
export const URL_VARIABLES = ['IDLEASE_URL', 'DATABASE_URL'] as const;

/**
 * The URL a command uses and where it came from: --url, else $IDLEASE_URL, else $DATABASE_URL
 * (what most apps already set), else undefined (the embedded default). A variable that is set
 * but empty is refused: an unset variable in a script must not fall back to a new embedded
 * database whose IDs collide with the real ones.
 */
export function resolveUrl(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): { url?: string; source?: UrlSource } {
  if (flag !== undefined) {
    if (flag.trim() === '')
      throw new IdleaseError(
        'BAD_CONFIG',
        '--url is empty (an unset variable?). Give mysql://…, postgres://… or pglite:<dir>, or leave --url out for the embedded PGlite in ./.idlease/.',
      );
    return { url: flag, source: '--url' };
  }
  for (const name of URL_VARIABLES) {
    const value = env[name];
    if (value === undefined) continue;
    if (value.trim() === '') {
      throw new IdleaseError(
        'BAD_CONFIG',
        `${name} is set but empty. Set it to mysql://…, postgres://… or pglite:<dir>, or unset it for the embedded PGlite in ./.idlease/.`,
      );
    }
    return { url: value, source: name };
  }
  return {};
}

/** The URL a command uses: --url, else $IDLEASE_URL, else $DATABASE_URL, else undefined (the embedded default). */
export function targetUrl(cmd: Command): string | undefined {
  return resolveUrl(globals(cmd).url).url;
}

export interface OpenedDatabase {
  /** The lock on the embedded directory, held until the command's knex closes. */
  readonly lock?: DirectoryLock;
}

export interface WithKnexOptions<T> {
  /**
   * Commands that draw IDs: when `idlease serve` holds the embedded directory, go through it
   * instead of waiting for a lock it keeps for its whole life.
   */
  readonly viaServe?: (serve: NonNullable<LockHolder['serve']>) => Promise<T>;
  /** serve may run on pglite:memory (it says so); every other command would forget what it did. */
  readonly allowMemory?: boolean;
}

/**
 * Take an embedded directory's lock for a command, waiting as --lock-wait says; undefined when
 * `idlease serve` holds it and the command goes through the server instead (`serve` is set).
 */
async function lockEmbedded(
  cmd: Command,
  dir: string,
  viaServe: boolean,
): Promise<{ lock?: DirectoryLock; serve?: NonNullable<LockHolder['serve']> }> {
  let serve: LockHolder['serve'];
  const lock = await acquireDirectoryLock(dir, {
    timeoutMs: globals(cmd).lockWait ?? DEFAULT_LOCK_TIMEOUT_MS,
    stopWaiting: (holder) => {
      serve = viaServe ? holder?.serve : undefined;
      return serve !== undefined;
    },
  });
  return lock ? { lock } : { serve: serve! };
}

/** Open the database the user named (or the embedded PGlite), run `fn`, always close. */
export async function withKnex<T>(
  cmd: Command,
  fn: (knex: ConnectedKnex, db: OpenedDatabase) => Promise<T>,
  options: WithKnexOptions<T> = {},
): Promise<T> {
  const url = targetUrl(cmd);
  const embedded = pgliteTarget(url);
  if (embedded?.dir === undefined && embedded !== undefined && !options.allowMemory) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${url} keeps nothing once this command exits: the next run would start from 1 again and repeat IDs. Use pglite:<dir> (kept on disk), or leave --url out for ./${DEFAULT_PGLITE_DIR}/.`,
    );
  }
  // An embedded directory opens one way for every command: withPGlite (lock, template, PGlite), knex on top.
  if (embedded?.dir !== undefined)
    return withPGlite(cmd, embedded.dir, async (session) => fn(await session.knex(), { lock: session.lock }), options);
  const knex = await openDatabase(cmd, url);
  let refused = false;
  try {
    try {
      await refuseBadConnection(knex, url, waitMs(cmd));
    } catch (err) {
      refused = true;
      throw err;
    }
    return await fn(knex, {});
  } finally {
    // A refused connection may leave a connect attempt that only its driver timeout ends (bin.ts exits past it).
    if (refused) await settlesWithin(knex.destroy(), 200);
    else await knex.destroy();
  }
}

/** The embedded directory a command would open (--url pglite:<dir> or the default), or undefined for a server or pglite:memory. */
export function embeddedDir(cmd: Command): string | undefined {
  return pgliteTarget(targetUrl(cmd))?.dir;
}

export interface EmbeddedSession {
  readonly db: PGlite;
  /** The directory's lock, held until the session ends (serve writes its URL into it). */
  readonly lock: DirectoryLock;
  /**
   * knex on the same open PGlite, made on first call (loading knex then): for what needs knex,
   * such as migrating a directory that is not current. It never closes the PGlite.
   */
  knex(): Promise<ConnectedKnex>;
}

/**
 * `withKnex` for an embedded directory without knex: the directory's lock first, then PGlite,
 * then `fn`; PGlite is closed before the lock is let go, as EmbeddedClient does.
 */
export async function withPGlite<T>(
  cmd: Command,
  dir: string,
  fn: (session: EmbeddedSession) => Promise<T>,
  options: WithKnexOptions<T> = {},
): Promise<T> {
  refuseSecondDefault(cmd, dir);
  const held = await lockEmbedded(cmd, dir, options.viaServe !== undefined);
  if (!held.lock) return options.viaServe!(held.serve!);
  const lock = held.lock;
  let db: PGlite | undefined;
  let knex: ConnectedKnex | undefined;
  try {
    // The lock made the directory's parent; a new directory is unpacked from the template, or made by PGlite's initdb.
    let isNew: boolean;
    try {
      ({ db, isNew } = await openEmbedded(dir, preloadedPGlite()));
    } catch (cause) {
      if (cause instanceof IdleaseError) throw cause;
      throw new IdleaseError('DB_UNAVAILABLE', `Cannot open the embedded database ${dir}: ${(cause as Error)?.message ?? String(cause)}`, {
        cause,
      });
    }
    const opened = db;
    if (isNew) announceNewDatabase(cmd, dir);
    return await fn({
      db: opened,
      lock,
      knex: async () => {
        if (knex === undefined) {
          const { connectOpenPGlite } = await import('../connect.js');
          knex = connectOpenPGlite(dir, opened, cliLog(cmd));
        }
        return knex;
      },
    });
  } finally {
    try {
      await knex?.destroy();
      if (db !== undefined && !db.closed) await db.close();
    } finally {
      lock.release();
    }
  }
}

/**
 * One line on stderr when a command made a new embedded database: IDs from it start at 1, and
 * a user who meant a server (a URL in a variable idlease does not read, a typo) must see that
 * before using them.
 */
function announceNewDatabase(cmd: Command, dir: string): void {
  const isDefault = path.resolve(dir) === path.resolve(DEFAULT_PGLITE_DIR);
  const shown = path.isAbsolute(dir) ? dir : `./${dir}`;
  process.stderr.write(
    isDefault && globals(cmd).url === undefined
      ? `idlease: created a new embedded database in ${shown}/ (no --url, $IDLEASE_URL or $DATABASE_URL is set); add .idlease/ to .gitignore\n`
      : `idlease: created a new embedded database in ${shown}/\n`,
  );
}

/**
 * A wrong password, database or host name will not fix itself: a one-shot command says so at
 * once instead of waiting out the allocators' retry bound and calling the database unavailable.
 * A server that refuses connections is retried for `waitForMs` (--wait) and then named as
 * DB_UNAVAILABLE, unless `unreachableIsFatal` is false (one ticket server of several may be down).
 */
export async function refuseBadConnection(
  knex: KnexLike,
  url: string | undefined,
  waitForMs = DEFAULT_WAIT_MS,
  unreachableIsFatal = true,
): Promise<void> {
  const target = url ? redact(url) : 'the embedded PGlite';
  const probing = connectionErrorWithin(knexExecutor(knex), unreachableIsFatal ? waitForMs : 0);
  const mysqlAt = url === undefined ? undefined : mysqlAddress(url);
  // A MySQL server greets at once; one still silent after half a second may be PostgreSQL, which waits
  // for the client. Only then is it sniffed: a sniff MySQL saw would count as a failed handshake
  // (max_connect_errors) against this host.
  const sniff = mysqlAt === undefined ? undefined : postgresInstead(mysqlAt, Math.max(500, Math.min(1000, waitForMs / 2)));
  let err: unknown;
  try {
    err = sniff === undefined ? await probing : await Promise.race([probing, sniff.found]);
  } finally {
    sniff?.cancel();
  }
  const protocol = serverProtocol(url);
  if (err === WRONG_SERVER && protocol) throw new IdleaseError('BAD_CONFIG', wrongServerMessage(target, protocol));
  // A server that waits for the client (PostgreSQL) met one that spoke first: a MySQL greeting.
  if (err !== undefined && protocol?.serverSpeaksFirst === false && isForeignProtocolAnswer(err)) {
    throw new IdleaseError('BAD_CONFIG', wrongServerMessage(target, protocol), { cause: err });
  }
  // The server answered but is not one idlease is tested on (dialects/engine.ts): its refusal says so.
  if (err instanceof IdleaseError) throw err;
  const problem = connectionProblem(err);
  const driver = (err as Error | undefined)?.message ?? String(err);
  if (isConfigProblem(problem)) {
    throw new IdleaseError('BAD_CONFIG', `cannot use ${target}: ${describeConnectionProblem(problem!)} (${driver}).`, { cause: err });
  }
  if (problem === 'unreachable' && unreachableIsFatal) {
    throw new IdleaseError(
      'DB_UNAVAILABLE',
      `cannot reach ${target} within ${formatSeconds(waitForMs)} (${driver}): check that it is running and reachable, then rerun (--wait <seconds> waits longer).`,
      { cause: err },
    );
  }
}

const WRONG_SERVER = Symbol('wrong server');

function mysqlAddress(url: string): { host: string; port: number } | undefined {
  try {
    const target = readDatabaseUrl(url);
    if (target.kind !== 'server' || !target.protocol.serverSpeaksFirst) return undefined;
    const u = target.parsed;
    return { host: u.hostname || '127.0.0.1', port: u.port ? Number(u.port) : target.protocol.defaultPort };
  } catch {
    return undefined;
  }
}

/**
 * `found` resolves to WRONG_SERVER when, `afterMs` in, a PostgreSQL server answers at a mysql://
 * URL's address, and never otherwise; `cancel()` once the probe has settled, so that no sniff runs after it.
 */
function postgresInstead(at: { host: string; port: number }, afterMs: number): { found: Promise<typeof WRONG_SERVER>; cancel(): void } {
  let timer: NodeJS.Timeout | undefined;
  const found = new Promise<typeof WRONG_SERVER>((resolve) => {
    timer = setTimeout(() => {
      void postgresAnswersAt(at.host, at.port, 1000).then((yes) => {
        if (yes) resolve(WRONG_SERVER);
      });
    }, afterMs);
    timer.unref();
  });
  return { found, cancel: () => clearTimeout(timer) };
}

export function formatSeconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`;
}

export function describeTarget(cmd: Command): string {
  const url = targetUrl(cmd);
  return url === undefined ? `embedded PGlite in ./${DEFAULT_PGLITE_DIR}/` : redact(url);
}

/** JSON with every bigint written as a string: IDs pass 2^53 and JSON numbers do not survive that. */
export function toJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
}

export function print(cmd: Command, human: string | string[], machine: unknown): void {
  if (globals(cmd).json) process.stdout.write(toJson(machine) + '\n');
  else process.stdout.write((Array.isArray(human) ? human.join('\n') : human) + '\n');
}

/** `--wait <seconds>`: a positive number of seconds (fractions allowed), as milliseconds. */
export function secondsArg(value: string): number {
  if (!/^\d+(\.\d+)?$/.test(value) || Number(value) <= 0 || Number(value) > 3600) {
    throw new InvalidArgumentError(`expected a number of seconds from 0.001 to 3600, got ${JSON.stringify(value)}.`);
  }
  return Math.max(1, Math.round(Number(value) * 1000));
}

/** --lock-wait: like --wait, and 0 tries the lock once. */
export function lockSecondsArg(value: string): number {
  return /^0+(\.0+)?$/.test(value) ? 0 : secondsArg(value);
}

/** Parse a positive integer flag or argument; commander passes strings. */
export function positiveInt(name: string): (value: string) => number {
  return (value: string) => {
    if (!/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
      throw new InvalidArgumentError(`${name} must be a positive integer, got ${JSON.stringify(value)}.`);
    }
    return Number(value);
  };
}
