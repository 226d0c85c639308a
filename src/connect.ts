import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import type { Knex } from 'knex';
import { embeddedKnexConfig, type EmbeddedConnection } from './embedded/client.js';
import { DEFAULT_LOCK_TIMEOUT_MS } from './embedded/lock.js';
import { IdleaseError } from './errors.js';
import { DEFAULT_PGLITE_DIR, pgliteTarget, redact } from './urls.js';

export { DEFAULT_PGLITE_DIR, pgliteTarget, redact };

export interface ConnectOptions {
  /** Pool size for server databases (PGlite is always one connection). Default 4. */
  poolMax?: number;
  /**
   * Where knex's own warnings and errors go (one string each, prefixed "knex: "). Default:
   * stderr. The CLI passes one that prints only with --verbose, so a user sees its one-line
   * error and not the driver's stack traces.
   */
  log?: (line: string) => void;
  /**
   * PGlite directory only: how long opening waits while another process holds the directory
   * (one process at a time may open it). Default 10,000 ms, then `DB_LOCKED` naming the holder.
   */
  lockTimeoutMs?: number;
  /**
   * How long opening one server connection may take (mysql2 connectTimeout, pg
   * connectionTimeoutMillis). Default: the driver's (mysql2 10 s; pg none). The CLI passes its
   * --wait, so a server that accepts and never answers does not hold the command past it.
   */
  connectTimeoutMs?: number;
  /**
   * TCP keepalive on server connections: the kernel probes a connection idle this long (pg
   * keepAlive + keepAliveInitialDelayMillis, mysql2 enableKeepAlive + keepAliveInitialDelay).
   * Default 10,000 ms; 0 turns keepalive off. A dead idle connection is closed this long plus
   * ten probes a second apart later (libuv sets the interval and count). Only an idle
   * connection is probed: a statement in flight waits on TCP's retransmissions instead, which
   * is why every idlease wait has a bound of its own (docs/failover.md, "Network partitions").
   */
  keepAliveMs?: number;
}

/** connect()'s keepalive default: pg sends none unless asked, and mysql2's default first probe comes after the kernel's 2 hours. */
export const DEFAULT_KEEPALIVE_MS = 10_000;

/**
 * A knex handle from a URL, with the driver set up so no int8 is ever parsed into a JS
 * number: mysql2 gets supportBigNumbers + bigNumberStrings; pg already returns strings;
 * PGlite values are normalised where they are read (toBigInt).
 *
 * URLs: mysql://user:pass@host:port/db, mariadb://…, postgres://… or postgresql://…,
 * pglite:<dir> (a directory), pglite:memory. Undefined → the embedded PGlite in ./.idlease/.
 * A PGlite directory is opened on first use, under a lock that keeps every other process out
 * until this knex is destroyed (src/embedded/lock.ts).
 */
export function connect(url?: string, options: ConnectOptions = {}): Knex {
  return loadKnex()(knexConfig(url, options));
}

/** What connect() returns, named for callers that need knex's own face (migrate(), destroy()) without importing knex. */
export type ConnectedKnex = Knex;

/** knex on a PGlite the caller opened under the directory's lock (the CLI, to migrate it): knex never closes that PGlite. */
export function connectOpenPGlite(dir: string, open: object, log: (line: string) => void): Knex {
  return loadKnex()({ ...embeddedConfig({ dir, open }), log: knexLog(log) });
}

/** The knex config connect() uses, for knexfiles and apps that build their own knex. */
export function knexConfig(url?: string, options: ConnectOptions = {}): Knex.Config {
  return { ...driverConfig(url, options), log: knexLog(options.log ?? toStderr) };
}

/**
 * knex logs to stdout, which would corrupt `--json` output; and its "can't take lock"
 * warnings are noise here, because migrate() waits for the lock itself. Its "Connection Error"
 * lines come with every failover and restart (a pooled connection found dead or retired): the
 * allocators report those themselves, typed, through their events and errors.
 */
export function knexLog(write: (line: string) => void): Knex.Config['log'] {
  return {
    warn(message: unknown) {
      if (/Can't take lock|release the lock manually|^Connection Error/.test(String(message))) return;
      write(`knex: ${String(message)}`);
    },
    error(message: unknown) {
      write(`knex: ${String(message)}`);
    },
    deprecate(method: unknown, alternative: unknown) {
      write(`knex: ${String(method)} is deprecated, use ${String(alternative)}`);
    },
    debug() {},
  };
}

const toStderr = (line: string) => void process.stderr.write(line + '\n');

function driverConfig(url: string | undefined, options: ConnectOptions): Knex.Config {
  const poolMax = options.poolMax ?? 4;
  const keepAliveMs = options.keepAliveMs ?? DEFAULT_KEEPALIVE_MS;
  if (!Number.isSafeInteger(keepAliveMs) || keepAliveMs < 0) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `keepAliveMs must be a whole number of ms ≥ 0 (0 turns keepalive off), got ${String(keepAliveMs)}.`,
    );
  }
  if (url === '') {
    throw new IdleaseError(
      'BAD_CONFIG',
      'The database URL is empty. Give mysql://…, postgres://… or pglite:<dir>, or pass no URL for the embedded PGlite in ./.idlease/.',
    );
  }
  const embedded = pgliteTarget(url);
  if (embedded) return embeddedConfig({ dir: embedded.dir, lockTimeoutMs: options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS });
  url = url as string;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (cause) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `Cannot parse database URL ${redact(url)}. Use mysql://user:pass@host:3306/db or postgres://user@host:5432/db.`,
      { cause },
    );
  }
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  const common = {
    host: parsed.hostname || '127.0.0.1',
    user: decodeURIComponent(parsed.username),
    password: decodeURIComponent(parsed.password),
    database: database || undefined,
  };
  switch (parsed.protocol) {
    case 'mysql:':
    case 'mariadb:':
      return {
        client: 'mysql2',
        connection: {
          ...common,
          user: common.user || 'root',
          port: parsed.port ? Number(parsed.port) : 3306,
          supportBigNumbers: true,
          bigNumberStrings: true,
          ...(options.connectTimeoutMs === undefined ? {} : { connectTimeout: options.connectTimeoutMs }),
          enableKeepAlive: keepAliveMs > 0,
          ...(keepAliveMs > 0 ? { keepAliveInitialDelay: keepAliveMs } : {}),
        },
        pool: { min: 0, max: poolMax },
      };
    case 'postgres:':
    case 'postgresql:':
      return {
        client: 'pg',
        connection: {
          ...common,
          user: common.user || 'postgres',
          port: parsed.port ? Number(parsed.port) : 5432,
          ...(options.connectTimeoutMs === undefined ? {} : { connectionTimeoutMillis: options.connectTimeoutMs }),
          keepAlive: keepAliveMs > 0,
          ...(keepAliveMs > 0 ? { keepAliveInitialDelayMillis: keepAliveMs } : {}),
        },
        pool: { min: 0, max: poolMax },
      };
    default:
      throw new IdleaseError(
        'BAD_CONFIG',
        `Unsupported database URL scheme ${JSON.stringify(parsed.protocol)}. Use mysql://, mariadb://, postgres:// or pglite:<dir>.`,
      );
  }
}

/** The knex config of a PGlite database (the directory's parent created); the CLI hands over a lock it already took. */
export function embeddedConfig(connection: EmbeddedConnection): Knex.Config {
  if (connection.dir !== undefined) mkdirSync(path.dirname(path.resolve(connection.dir)), { recursive: true });
  return embeddedKnexConfig(connection);
}

/**
 * knex is loaded on the first connect(), not when idlease is imported: an app that hands
 * idlease a pg or mysql2 pool never loads it (knex and its dialects are ~2 MB of modules).
 */
function loadKnex(): (config: Knex.Config) => Knex {
  return createRequire(import.meta.url)('knex') as (config: Knex.Config) => Knex;
}
