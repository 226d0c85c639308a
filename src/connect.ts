import { mkdirSync, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import path from 'node:path';
import { createRequire } from 'node:module';
import type { Knex } from 'knex';
import { embeddedKnexConfig, type EmbeddedConnection } from './embedded/client.js';
import { DEFAULT_LOCK_TIMEOUT_MS } from './embedded/lock.js';
import { tlsFallbackFor, withTlsFallback } from './drivers/tls-fallback.js';
import { IdleaseError } from './errors.js';
import { DEFAULT_PGLITE_DIR, pgliteTarget, readDatabaseUrl, redact, type ServerProtocol } from './urls.js';

export { DEFAULT_PGLITE_DIR, pgliteTarget, redact };

/** The CLI's embedded default as a URL's directory, written the same on every OS for the message. */
const EMBEDDED_DEFAULT_URL_DIR = DEFAULT_PGLITE_DIR.split(path.sep).join('/');

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
 * pglite:<dir> (a directory), pglite:memory. No URL (undefined or empty) is BAD_CONFIG, never a
 * database picked here: an app whose variable is unset (`connect(process.env.DATABSE_URL)`) would
 * otherwise start a fresh ./.idlease/ at 1, and every pod with it (the CLI keeps its embedded
 * default: it asks for pglite:.idlease/pglite itself, and says when it creates it).
 * TLS words mean what libpq and the mysql client mean by them: `?sslmode=verify-full&sslrootcert=ca.pem`
 * (PostgreSQL, read by pg's own parser) or `?ssl-mode=VERIFY_IDENTITY&ssl-ca=ca.pem`
 * (MySQL/MariaDB); no mode is prefer / PREFERRED (TLS when the server has it, else plain text);
 * a TLS failure is BAD_CONFIG at the first statement (postgresConfig, mysqlConfig).
 * Percent-encode `@ : / %` in a password.
 * A PGlite directory is opened on first use, under a lock that keeps every other process out
 * until this knex is destroyed (src/embedded/lock.ts).
 */
export function connect(url: string | undefined, options: ConnectOptions = {}): Knex {
  return loadKnex()(knexConfig(url, options));
}

/** What connect() returns, named for callers that need knex's own face (migrate(), destroy()) without importing knex. */
export type ConnectedKnex = Knex;

/** knex on a PGlite the caller opened under the directory's lock (the CLI, to migrate it): knex never closes that PGlite. */
export function connectOpenPGlite(dir: string, open: object, log: (line: string) => void): Knex {
  return loadKnex()({ ...embeddedConfig({ dir, open }), log: knexLog(log) });
}

/** The knex config connect() uses, for knexfiles and apps that build their own knex. */
export function knexConfig(url: string | undefined, options: ConnectOptions = {}): Knex.Config {
  return { ...driverConfig(url, options), log: options.log === undefined ? knexLog(toStderr, true) : knexLog(options.log) };
}

/**
 * knex logs to stdout, which would corrupt `--json` output; and its "can't take lock"
 * warnings are noise here, because migrate() waits for the lock itself. Its "Connection Error"
 * lines come with every failover and restart (a pooled connection found dead or retired): the
 * allocators report those themselves, typed, through their events and errors. Its "Acquire
 * connection error" (a stack trace per attempt to reach a server that is down) is the error the
 * caller's own statement then rejects with: a library prints nothing on stderr by itself.
 */
export function knexLog(write: (line: string) => void, toOwnStderr = false): Knex.Config['log'] {
  // A caller that gave its own sink (the CLI's --verbose) asked to see the attempts.
  const dropped = toOwnStderr
    ? /Can't take lock|release the lock manually|^Connection Error|^Acquire connection error/
    : /Can't take lock|release the lock manually|^Connection Error/;
  return {
    warn(message: unknown) {
      if (dropped.test(String(message))) return;
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
  if (url === undefined || url.trim() === '') {
    throw new IdleaseError(
      'BAD_CONFIG',
      `No database URL was given (${url === undefined ? 'undefined' : 'an empty string'}: an unset environment variable?). Pass one: mysql://user:pass@host:3306/db, ` +
        `postgres://user@host:5432/db — or, for the embedded PGlite on purpose, pglite:${EMBEDDED_DEFAULT_URL_DIR} (a directory) or pglite:memory. ` +
        'idlease does not pick a database by itself: a fresh one starts every tag at 1 again.',
    );
  }
  const target = readDatabaseUrl(url);
  if (target.kind === 'embedded')
    return embeddedConfig({ dir: target.dir, lockTimeoutMs: options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS });
  const extras = { poolMax, keepAliveMs, connectTimeoutMs: options.connectTimeoutMs };
  return CONFIG_OF[target.protocol.driver](target.url, extras);
}

/** The knex config per driver a server URL's protocol names. */
const CONFIG_OF: Readonly<Record<ServerProtocol['driver'], (url: string, extras: DriverExtras) => Knex.Config>> = {
  mysql2: (url, extras) => mysqlConfig(url, extras),
  pg: (url, extras) => postgresConfig(url, extras),
};

interface DriverExtras {
  readonly poolMax: number;
  readonly keepAliveMs: number;
  readonly connectTimeoutMs: number | undefined;
}

/** A URL the reading parser refused, said without the URL's secrets (Node's URL error carries the whole input). */
function unparseable(url: string, why?: unknown): IdleaseError {
  const reason = why instanceof Error && (why as NodeJS.ErrnoException).code !== 'ERR_INVALID_URL' ? ` (${why.message})` : '';
  return new IdleaseError(
    'BAD_CONFIG',
    `Cannot parse database URL ${redact(url)}${reason}. Use mysql://user:pass@host:3306/db or postgres://user@host:5432/db; percent-encode @ : / % in a password.`,
  );
}

type PgParse = (url: string, options: { useLibpqCompat: boolean }) => Record<string, unknown>;

/**
 * PostgreSQL: the URL is read by node-postgres's own parser (pg-connection-string, the copy pg
 * depends on), with libpq's meaning of `sslmode`: disable (plain text), allow (plain text; TLS
 * when the server refuses plain text), prefer (the default: TLS when the server has it, else plain
 * text), require (TLS, no certificate check; with `sslrootcert` the chain is checked, as libpq
 * does), verify-ca (the chain against `sslrootcert`), verify-full (the chain and the host name);
 * `sslcert`/`sslkey` give a client certificate. prefer checks the chain too when `sslrootcert` is
 * given. Only prefer and allow ever fall back (drivers/tls-fallback.ts), and only on the server's
 * answer about TLS, never on a certificate that does not verify. A mode given twice is refused.
 */
function postgresConfig(url: string, extras: DriverExtras): Knex.Config {
  const fromPg = createRequire(createRequire(import.meta.url).resolve('pg'));
  const parse = (fromPg('pg-connection-string') as { parse: PgParse }).parse;
  const mode = onlyMode(url, ['sslmode'], PG_SSL_MODES) ?? 'prefer';
  // pg's parser knows neither allow nor an absent mode: read the URL with the mode of each attempt.
  const read = (asMode: string): Record<string, unknown> => {
    const withMode = /[?&]sslmode=/.test(url)
      ? url.replace(/([?&])sslmode=[^&#]*/, `$1sslmode=${asMode}`)
      : `${url}${url.includes('?') ? '&' : '?'}sslmode=${asMode}`;
    let parsed: Record<string, unknown>;
    try {
      parsed = parse(withMode, { useLibpqCompat: true });
    } catch (cause) {
      throw unparseable(url, cause);
    }
    // pg reads unknown keys as nothing; drop the empty ones so defaults apply.
    const connection: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(parsed)) if (value !== undefined && value !== null && value !== '') connection[key] = value;
    delete connection.sslmode;
    const ssl = connection.ssl as Record<string, unknown> | undefined;
    // libpq checks the chain whenever a root certificate is given and TLS is used (prefer, require).
    if (asMode === 'prefer' && ssl && ssl.ca !== undefined)
      connection.ssl = { ...ssl, rejectUnauthorized: true, checkServerIdentity: () => undefined };
    return {
      ...connection,
      host: (connection.host as string | undefined) ?? '127.0.0.1',
      user: (connection.user as string | undefined) ?? 'postgres',
      port: connection.port === undefined ? 5432 : Number(connection.port),
      ...(extras.connectTimeoutMs === undefined ? {} : { connectionTimeoutMillis: extras.connectTimeoutMs }),
      keepAlive: extras.keepAliveMs > 0,
      ...(extras.keepAliveMs > 0 ? { keepAliveInitialDelayMillis: extras.keepAliveMs } : {}),
    };
  };
  const pool = { min: 0, max: extras.poolMax };
  if (mode === 'prefer') {
    const tls = read('prefer');
    return { client: tlsFallbackClient('pg'), connection: withTlsFallback(tls, { ...tls, ssl: false }, 'server-has-no-tls'), pool };
  }
  if (mode === 'allow') {
    return { client: tlsFallbackClient('pg'), connection: withTlsFallback(read('disable'), read('prefer'), 'server-requires-tls'), pool };
  }
  return { client: tlsFallbackClient('pg'), connection: read(mode), pool };
}

const PG_SSL_MODES = ['disable', 'allow', 'prefer', 'require', 'verify-ca', 'verify-full'] as const;

/**
 * The TLS mode a URL names, checked against the engine's words; undefined when it names none.
 * Given twice (under any of its spellings) it is refused: libpq and the mysql client would take
 * one of them without a word, and `sslmode=require&sslmode=disable` must not connect in plain text.
 */
function onlyMode(url: string, names: readonly string[], modes: readonly string[]): string | undefined {
  const hash = url.indexOf('#');
  const query = url
    .slice(0, hash < 0 ? undefined : hash)
    .split('?')
    .slice(1)
    .join('?');
  const params = new URLSearchParams(query);
  const given = names.flatMap((name) => params.getAll(name).map((value) => ({ name, value })));
  if (given.length > 1) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `The database URL gives the TLS mode ${given.length} times (${given.map((g) => `${g.name}=${g.value}`).join(', ')}): give ${names[0]} once.`,
    );
  }
  if (given.length === 0) return undefined;
  const { name, value } = given[0]!;
  const normal = modes.includes(value) ? value : modes.find((m) => m === value.toUpperCase().replace(/-/g, '_'));
  if (normal === undefined) throw new IdleaseError('BAD_CONFIG', `${name}=${JSON.stringify(value)} is not one of ${modes.join(', ')}.`);
  return normal;
}

const MYSQL_SSL_MODES = ['DISABLED', 'PREFERRED', 'REQUIRED', 'VERIFY_CA', 'VERIFY_IDENTITY'] as const;

/**
 * MySQL/MariaDB: the URL is read as mysql2 reads its `uri` (WHATWG URL; other query parameters
 * pass to mysql2 as it would pass them, JSON values parsed), plus the mysql client's TLS
 * options, which mysql2 has no URL form for: `ssl-mode` (DISABLED, PREFERRED, REQUIRED,
 * VERIFY_CA, VERIFY_IDENTITY), `ssl-ca`, `ssl-cert`, `ssl-key` (files). As the mysql client:
 * no mode is PREFERRED (with `ssl-ca` or `ssl-cert` and no mode, VERIFY_IDENTITY), which tries
 * TLS and falls back to plain text only when the server has no TLS (drivers/tls-fallback.ts);
 * REQUIRED encrypts without checking the certificate (with `ssl-ca` it checks the chain),
 * VERIFY_CA checks the chain, VERIFY_IDENTITY the chain and the host name. A mode given twice
 * (as ssl-mode, ssl_mode or sslmode) is refused.
 */
function mysqlConfig(url: string, extras: DriverExtras): Knex.Config {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (cause) {
    throw unparseable(url, cause);
  }
  const params = new Map<string, string>();
  for (const [key, value] of parsed.searchParams) params.set(key, value);
  const take = (...names: string[]): string | undefined => {
    let found: string | undefined;
    for (const name of names) {
      for (const spelling of [name, name.replace(/-/g, '_')]) {
        if (params.has(spelling)) found = params.get(spelling);
        params.delete(spelling);
      }
    }
    return found;
  };
  const modeText = onlyMode(url, ['ssl-mode', 'ssl_mode', 'sslmode'], MYSQL_SSL_MODES);
  take('ssl-mode', 'sslmode');
  const caFile = take('ssl-ca', 'sslrootcert');
  const certFile = take('ssl-cert', 'sslcert');
  const keyFile = take('ssl-key', 'sslkey');
  const mode = modeText ?? (caFile || certFile ? 'VERIFY_IDENTITY' : 'PREFERRED');
  const rest: Record<string, unknown> = {};
  for (const [key, value] of params) {
    try {
      rest[key] = JSON.parse(value);
    } catch {
      rest[key] = value;
    }
  }
  const read = (file: string | undefined, what: string) => {
    if (file === undefined) return undefined;
    try {
      return readFileSync(file, 'utf8');
    } catch (cause) {
      throw new IdleaseError('BAD_CONFIG', `Cannot read the ${what} ${file} named in the database URL: ${(cause as Error).message}.`, {
        cause,
      });
    }
  };
  const files = { ca: read(caFile, 'ssl-ca'), cert: read(certFile, 'ssl-cert'), key: read(keyFile, 'ssl-key') };
  const pem = Object.fromEntries(Object.entries(files).filter(([, v]) => v !== undefined));
  const ssl =
    mode === 'DISABLED'
      ? undefined
      : mode === 'VERIFY_IDENTITY'
        ? { ...pem, rejectUnauthorized: true, verifyIdentity: true }
        : mode === 'VERIFY_CA' || (mode === 'REQUIRED' && files.ca !== undefined)
          ? { ...pem, rejectUnauthorized: true, verifyIdentity: false }
          : { ...pem, rejectUnauthorized: false, verifyIdentity: false };
  const hostname = parsed.hostname.startsWith('[') ? parsed.hostname.slice(1, -1) : parsed.hostname;
  // mysql2 checks the certificate's name only for a host name: for an IP address it would check nothing.
  if (mode === 'VERIFY_IDENTITY' && isIP(hostname) !== 0) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `TLS: ssl-mode=VERIFY_IDENTITY needs the host name the server's certificate names, not the address ${hostname} (mysql2 does not check an address against the certificate). Use that name, or ssl-mode=VERIFY_CA to check the chain only.`,
    );
  }
  const connection = {
    ...rest,
    host: decodeURIComponent(hostname) || '127.0.0.1',
    port: parsed.port ? Number(parsed.port) : 3306,
    user: decodeURIComponent(parsed.username) || 'root',
    password: decodeURIComponent(parsed.password),
    database: decodeURIComponent(parsed.pathname.slice(1)) || undefined,
    ...(ssl === undefined ? {} : { ssl }),
    supportBigNumbers: true,
    bigNumberStrings: true,
    ...(extras.connectTimeoutMs === undefined ? {} : { connectTimeout: extras.connectTimeoutMs }),
    enableKeepAlive: extras.keepAliveMs > 0,
    ...(extras.keepAliveMs > 0 ? { keepAliveInitialDelay: extras.keepAliveMs } : {}),
  };
  const pool = { min: 0, max: extras.poolMax };
  if (mode !== 'PREFERRED') return { client: 'mysql2', connection, pool };
  const { ssl: _tls, ...plain } = connection;
  return { client: tlsFallbackClient('mysql2'), connection: withTlsFallback(connection, plain, 'server-has-no-tls'), pool };
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

type KnexClientClass = new (config: unknown) => {
  connectionSettings: unknown;
  acquireRawConnection(): Promise<unknown>;
  /** knex's pg client: the server version from version()'s text. */
  _parseVersion?(text: string): string;
};

const classes = new Map<string, KnexClientClass>();

const KNEX_CLIENT_FILE: Readonly<Record<ServerProtocol['driver'], string>> = {
  pg: './lib/dialects/postgres/index.js',
  mysql2: './lib/dialects/mysql2/index.js',
};

/**
 * knex's own client for `dialect` ('pg' or 'mysql2') whose new connections follow the mark: knex
 * opens each one from `this.connectionSettings`, read synchronously when the attempt starts, so
 * the second attempt swaps in the fallback settings for exactly that call. connect() builds every
 * server's knex on it, a URL without a TLS fallback too.
 */
export function tlsFallbackClient(dialect: 'pg' | 'mysql2'): typeof Knex.Client {
  let cls = classes.get(dialect);
  if (cls === undefined) {
    const req = createRequire(createRequire(import.meta.url).resolve('knex'));
    const Base = req(KNEX_CLIENT_FILE[dialect]) as KnexClientClass;
    cls = class extends Base {
      override async acquireRawConnection(): Promise<unknown> {
        const settings = this.connectionSettings;
        try {
          return await super.acquireRawConnection();
        } catch (err) {
          const next = tlsFallbackFor(settings, err);
          if (next === undefined) throw err;
          // Only this call reads the swapped settings (synchronously, as it starts): others keep theirs.
          this.connectionSettings = next;
          let second: Promise<unknown>;
          try {
            second = super.acquireRawConnection();
          } finally {
            this.connectionSettings = settings;
          }
          return await second;
        }
      }

      /**
       * knex's pg client reads version() on a pool's first connection and, on an answer that is not
       * PostgreSQL's (CockroachDB's), throws a TypeError from inside the driver's callback, past
       * every handler. The text is kept as it is instead: the engine (dialects/engine.ts) reads
       * the same answer on idlease's first statement and refuses the server with what it is.
       */
      override _parseVersion(text: string): string {
        try {
          return super._parseVersion!(text);
        } catch {
          return text;
        }
      }
    };
    Object.defineProperty(cls, 'name', { value: dialect });
    classes.set(dialect, cls);
  }
  return cls as unknown as typeof Knex.Client;
}
