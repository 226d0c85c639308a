/**
 * Every URL idlease is given — a database URL, a Redis URL, a Redis Cluster URL — is read here,
 * once, by the grammar the drivers read it with (WHATWG `URL`: pg-connection-string, mysql2's
 * `uri` and node-redis all use it), and refused here before any driver sees it when a driver would
 * read it otherwise than as typed: a password typed unencoded (a stray `@`, `/`, `?`, `#`), a `%`
 * that starts no escape (the drivers' decodeURIComponent threw `URI malformed`, INTERNAL, or a
 * trusting server let the connection through). Every message shows the URL redacted. connect(),
 * the CLI and serve call these; nothing else parses a URL's scheme or credentials. No knex or
 * driver is loaded (`idlease next` on the embedded default loads neither).
 */
import { readFileSync } from 'node:fs';
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
      'The PGlite URL "pglite:" names no directory. Use pglite:<dir> (kept on disk), or leave the URL out for ./.idlease/pglite/ (pglite:memory keeps nothing once the process exits: it is for the library and serve, not for CLI commands).',
    );
  }
  return { dir: target };
}

/** Query parameters that carry a secret in a driver's URL (pg's `password`, `sslpassword`; mysql2's `password1`…). */
const SECRET_PARAMS = /^(password\d?|sslpassword|passphrase|token|auth)$/i;

/**
 * The `@`s of a URL after its scheme, and whether the parser the drivers use reads exactly
 * one of them as the end of a user and password. Any other `@` (a second one, or one the parser
 * leaves in the path, query or fragment) means a password typed unencoded: `u:ab@c/de@host`
 * connects to host `c`, `admin:1234?pw@host` to host `admin` port 1234, and the driver's own
 * errors then quote a piece of the password (`getaddrinfo ENOTFOUND c`).
 */
function strayAt(url: string): boolean {
  const start = /^[a-z][a-z0-9+.-]*:(\/\/)?/i.exec(url)?.[0].length ?? 0;
  const ats = url.slice(start).split('@').length - 1;
  if (ats === 0) return false;
  if (ats > 1) return true;
  try {
    const parsed = new URL(url);
    return (parsed.pathname + parsed.search + parsed.hash).includes('@');
  } catch {
    return true;
  }
}

/**
 * Refuse, before any connection, a URL whose user and password the drivers would not read as
 * typed (see strayAt): BAD_CONFIG showing only what follows its last `@`. Redis URLs and
 * pglite: pass.
 */
export function refuseStrayAt(url: string, what = 'database URL'): void {
  if (/^pglite:/i.test(url) || !strayAt(url)) return;
  throw new IdleaseError(
    'BAD_CONFIG',
    `The ${what} ${redact(url)} holds an @ that is not the one between password and host (a password typed unencoded): ` +
      'percent-encode the password: @ as %40, / as %2F, ? as %3F, # as %23, : as %3A, % as %25 ' +
      '(e.g. node -p "encodeURIComponent(process.argv[1])" \'<password>\').',
  );
}

/**
 * A URL fit for messages, logs and files: the password (and any secret query parameter)
 * replaced by `***`. It reads the URL with the parser the drivers read it with (WHATWG `URL`:
 * pg-connection-string, mysql2's `uri` and node-redis all use it), so a password holding an
 * encoded `@`, `:`, `/` or `%` is found where the driver finds it. A URL that parser refuses,
 * or one with an `@` it does not read as the end of the password (`u:12?pw@h`, `u::?pw@h`,
 * `u:a@b/c@h`: a password typed unencoded), shows its scheme and what follows its last `@`,
 * never what precedes it: such a URL may hold a password whatever the parser makes of it.
 */
export function redact(url: string): string {
  if (/^pglite:/i.test(url)) return url;
  let parsed: URL | undefined;
  try {
    parsed = strayAt(url) ? undefined : new URL(url);
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined) {
    const scheme = /^[a-z][a-z0-9+.-]*:(\/\/)?/i.exec(url)?.[0] ?? '';
    const at = url.lastIndexOf('@');
    if (at < 0) return url.includes('?') ? `${url.slice(0, url.indexOf('?'))}?***` : url;
    const rest = url.slice(at + 1);
    return `${scheme}***@${rest.includes('?') ? `${rest.slice(0, rest.indexOf('?'))}?***` : rest}`;
  }
  if (parsed.password !== '') parsed.password = '***';
  for (const key of [...parsed.searchParams.keys()]) if (SECRET_PARAMS.test(key)) parsed.searchParams.set(key, '***');
  return parsed.toString();
}

/**
 * A `%` that starts no escape (`%zz`, a lone `%`) or escapes that decode to no text: the drivers
 * decode the user, password and database with decodeURIComponent and threw `URI malformed`.
 */
function refuseBadEscapes(url: string, what: string): void {
  if (/^pglite:/i.test(url)) return;
  try {
    decodeURIComponent(url);
  } catch {
    throw new IdleaseError(
      'BAD_CONFIG',
      `The ${what} ${redact(url)} holds a % that starts no percent-escape (in its user, password, database or parameters): ` +
        'percent-encode % itself as %25 (e.g. node -p "encodeURIComponent(process.argv[1])" \'<password>\').',
    );
  }
}

/**
 * What a server URL's scheme stands for: how connect() reaches it and how its server names a
 * database. Members, not a name to compare: which engine it is (MariaDB or MySQL, PostgreSQL or
 * CockroachDB) is asked of the server once connected (dialects/engine.ts).
 */
export interface ServerProtocol {
  /** For messages: the servers a URL of this scheme is for. */
  readonly label: string;
  /** The scheme to write, for messages ('mysql://'). */
  readonly scheme: string;
  /** The driver connect() builds a knex client for. */
  readonly driver: 'mysql2' | 'pg';
  readonly defaultPort: number;
  /** Whether the server speaks first on a new connection (MySQL's greeting); PostgreSQL's waits for the client. */
  readonly serverSpeaksFirst: boolean;
  /** Whether idlease's tables go into a schema inside the database (--schema applies) or into the database itself. */
  readonly schemas: boolean;
  /** Query parameters that name the database instead of the path. */
  readonly databaseParams: readonly string[];
  /** What a server does with a URL that names no database, beyond failing, with its leading space ('' when it just fails). */
  readonly noDatabaseNote: string;
}

const MYSQL_PROTOCOL: ServerProtocol = Object.freeze({
  label: 'MySQL/MariaDB',
  scheme: 'mysql://',
  driver: 'mysql2',
  defaultPort: 3306,
  serverSpeaksFirst: true,
  schemas: false,
  databaseParams: [],
  noDatabaseNote: '',
});

const POSTGRES_PROTOCOL: ServerProtocol = Object.freeze({
  label: 'PostgreSQL',
  scheme: 'postgres://',
  driver: 'pg',
  defaultPort: 5432,
  serverSpeaksFirst: false,
  schemas: true,
  databaseParams: ['dbname', 'database'],
  noDatabaseNote: ' (PostgreSQL would use the one named like the user, often the maintenance database postgres)',
});

/** Every database URL scheme idlease reads: a server protocol, or the embedded PGlite. */
const SCHEMES: Readonly<Record<string, ServerProtocol | 'embedded'>> = {
  postgres: POSTGRES_PROTOCOL,
  postgresql: POSTGRES_PROTOCOL,
  mysql: MYSQL_PROTOCOL,
  mariadb: MYSQL_PROTOCOL,
  pglite: 'embedded',
};

function schemeOf(url: string): string | undefined {
  return /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
}

/**
 * What a database URL names by its scheme: a server protocol, 'embedded' (no URL, pglite:), or
 * undefined for a scheme idlease does not read (no other checks: readDatabaseUrl refuses).
 */
export function urlProtocol(url: string | undefined): ServerProtocol | 'embedded' | undefined {
  if (url === undefined) return 'embedded';
  const scheme = schemeOf(url);
  return scheme === undefined ? undefined : SCHEMES[scheme];
}

/** The server protocol of a server URL; undefined for the embedded database and for what is no URL. */
export function serverProtocol(url: string | undefined): ServerProtocol | undefined {
  const p = urlProtocol(url);
  return typeof p === 'object' ? p : undefined;
}

export type DatabaseUrl =
  | { readonly kind: 'embedded'; readonly dir: string | undefined }
  | { readonly kind: 'server'; readonly protocol: ServerProtocol; readonly url: string; readonly parsed: URL };

/**
 * The one reading of a database URL: PGlite's directory, or a server URL checked before any
 * driver reads it (see the file's comment). undefined → the embedded default.
 */
export function readDatabaseUrl(url: string | undefined): DatabaseUrl {
  if (url === '') {
    throw new IdleaseError(
      'BAD_CONFIG',
      'The database URL is empty. Give mysql://…, postgres://… or pglite:<dir>, or pass no URL for the embedded PGlite in ./.idlease/.',
    );
  }
  const embedded = pgliteTarget(url);
  if (embedded) return { kind: 'embedded', dir: embedded.dir };
  const text = url as string;
  const scheme = schemeOf(text);
  const protocol = serverProtocol(text);
  if (protocol === undefined) {
    throw new IdleaseError(
      'BAD_CONFIG',
      scheme === undefined
        ? `Cannot parse database URL ${redact(text)}. Use mysql://user:pass@host:3306/db, postgres://user@host:5432/db or pglite:<dir>.`
        : `Unsupported database URL scheme "${scheme}:". Use mysql://, mariadb://, postgres:// or pglite:<dir>.`,
    );
  }
  // Before any driver reads it: a driver would connect to a piece of the password and quote it.
  refuseStrayAt(text);
  refuseBadEscapes(text, 'database URL');
  let parsed: URL;
  try {
    parsed = new URL(text);
  } catch {
    throw new IdleaseError(
      'BAD_CONFIG',
      `Cannot parse database URL ${redact(text)}. Use mysql://user:pass@host:3306/db or postgres://user@host:5432/db; percent-encode @ : / % in a password.`,
    );
  }
  return { kind: 'server', protocol, url: text, parsed };
}

/**
 * A server URL must name a database. MySQL: without one every statement fails with "No database
 * selected" (idlease's tables live in a database, there is no search path to fall back on).
 * PostgreSQL: pg (like libpq) would connect to the database named like the user — `postgres`,
 * the maintenance database, for most URLs — and `migrate` would put idlease's tables there.
 */
export function refuseNoDatabase(target: DatabaseUrl): void {
  if (target.kind === 'embedded' || target.parsed.pathname.replace(/^\/+/, '') !== '') return;
  if (target.protocol.databaseParams.some((p) => target.parsed.searchParams.has(p))) return;
  const example = new URL(target.parsed.href);
  example.pathname = '/app';
  const why = target.protocol.noDatabaseNote;
  throw new IdleaseError(
    'BAD_CONFIG',
    `${redact(target.url)} names no database${why}: add one to the URL, e.g. ${redact(example.href)} (create it first: CREATE DATABASE app).`,
  );
}

export interface RedisTarget {
  readonly cluster: boolean;
  /** One node URL per seed (the password included): node-redis reads each. */
  readonly nodes: readonly string[];
  readonly tls: boolean;
  readonly username?: string;
  readonly password?: string;
  readonly ca?: string;
}

/**
 * `redis[s]://…`: one server (TLS checked against `?ca=` when given, else the system's CAs).
 * `redis[s]+cluster://[user:password@]host1:port1,host2:port2[?ca=…]`: the seed nodes of a Redis
 * Cluster (one is enough; the client discovers the rest from it); a cluster has database 0 only.
 * Messages name nodes by position, never by text: what precedes a misplaced `@` may be password.
 */
export function parseRedisTarget(url: string): RedisTarget {
  const m = /^(rediss?)(\+cluster)?:\/\/(.+)$/i.exec(url);
  if (!m)
    throw new IdleaseError(
      'BAD_CONFIG',
      `${redact(url)} is not a Redis URL: give redis://host:6379 (rediss:// for TLS, redis+cluster://h1:p1,h2:p2 for a Redis Cluster) with --redis-url, --redis-url-file or $IDLEASE_REDIS_URL.`,
    );
  refuseBadEscapes(url, 'Redis URL');
  const scheme = m[1]!.toLowerCase();
  if (m[2] === undefined) {
    refuseStrayAt(url, 'Redis URL');
    const { url: one, ca } = redisTls(url);
    return { cluster: false, nodes: [one], tls: scheme === 'rediss', ...(ca === undefined ? {} : { ca }) };
  }
  const rest = m[3]!;
  // The user and password end at the last @: no host or port holds one.
  const at = rest.lastIndexOf('@');
  const userinfo = at < 0 ? '' : rest.slice(0, at + 1);
  const afterAuth = rest.slice(at + 1);
  const end = afterAuth.search(/[/?]|$/);
  const hosts = afterAuth.slice(0, end).split(',');
  const tail = afterAuth.slice(end);
  const bad = (why: string) =>
    new IdleaseError(
      'BAD_CONFIG',
      `${redact(url)}: ${why}. A Redis Cluster URL is ${scheme}+cluster://[:password@]host1:port1,host2:port2 (any of its nodes; ?ca=file for TLS); percent-encode @ : / ? # % in a password.`,
    );
  if (/[/?#]/.test(userinfo)) throw bad('its password holds / ? or # unencoded');
  const path = tail.replace(/\?.*$/, '');
  if (path !== '' && path !== '/' && path !== '/0') throw bad('a Redis Cluster has database 0 only');
  if (hosts.some((h) => h === '')) throw bad('an empty host');
  const query = tail.includes('?') ? tail.slice(tail.indexOf('?')) : '';
  const nodes: string[] = [];
  let ca: string | undefined;
  let username: string | undefined;
  let password: string | undefined;
  for (const [i, h] of hosts.entries()) {
    // Each node as a URL of its own: a cluster URL as a whole is no URL the parser reads (its
    // host is a list), so a stray @ is looked for node by node.
    refuseStrayAt(`${scheme}://${userinfo}${h}${query}`, 'Redis URL');
    let parsed: URL;
    try {
      parsed = new URL(`${scheme}://${userinfo}${h}${query}`);
    } catch {
      throw bad(`cannot parse node ${i + 1} of ${hosts.length}`);
    }
    if (parsed.port === '') throw bad(`node ${i + 1} of ${hosts.length} has no port`);
    const one = redisTls(parsed.toString());
    ca = one.ca;
    const u = new URL(one.url);
    username = u.username === '' ? undefined : decodeURIComponent(u.username);
    password = u.password === '' ? undefined : decodeURIComponent(u.password);
    nodes.push(one.url);
  }
  return {
    cluster: true,
    nodes,
    tls: scheme === 'rediss',
    ...(username === undefined ? {} : { username }),
    ...(password === undefined ? {} : { password }),
    ...(ca === undefined ? {} : { ca }),
  };
}

/**
 * `rediss://host:port?ca=/path/ca.pem`: TLS checked against that CA (the host name too); without
 * `ca`, against the system's CAs. node-redis reads the rest of the URL itself.
 */
export function redisTls(url: string): { url: string; ca?: string } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new IdleaseError(
      'BAD_CONFIG',
      `Cannot parse the Redis URL ${redact(url)}. Use redis://[:password@]host:6379 or rediss://… for TLS; percent-encode @ : / ? # % in a password.`,
    );
  }
  const file = parsed.searchParams.get('ca') ?? undefined;
  if (file === undefined) return { url };
  if (parsed.protocol !== 'rediss:')
    throw new IdleaseError('BAD_CONFIG', `?ca= is for TLS: use rediss:// instead of ${parsed.protocol}// in ${redact(url)}.`);
  parsed.searchParams.delete('ca');
  try {
    return { url: parsed.toString(), ca: readFileSync(file, 'utf8') };
  } catch (cause) {
    throw new IdleaseError('BAD_CONFIG', `Cannot read the CA ${file} named in the Redis URL: ${(cause as Error).message}.`, { cause });
  }
}
