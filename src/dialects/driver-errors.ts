/**
 * The one reading of what a database driver's error means (mysql2, pg, postgres.js, PGlite
 * all report MySQL errnos or PostgreSQL SQLSTATEs): every retry, NOT_MIGRATED, "server down"
 * and "check your URL" decision in idlease starts here, so a new driver or a new code is
 * taught in one place.
 */
export type DriverErrorKind =
  /** Rolled back whole after losing a race (deadlock, Galera certification, serialization): safe to run again at once. */
  | 'conflict'
  /** Waited too long for a lock held elsewhere: nothing changed; the server is alive but contended. */
  | 'lock-timeout'
  /** A table, sequence or schema idlease needs is not there: migrations have not run. */
  | 'missing-relation'
  /** A column idlease needs is not there: the table predates this version's migration. */
  | 'missing-column'
  | 'access-denied'
  | 'unknown-database'
  /**
   * TLS could not be set up as the URL asks: the server has none (pg "does not support SSL",
   * mysql2 HANDSHAKE_NO_SSL_SUPPORT), insists on it (hostssl only, require_secure_transport),
   * or its certificate did not verify (wrong CA, wrong host name, expired).
   */
  | 'tls'
  /** The resolver's definite "no such name" (NXDOMAIN). */
  | 'unknown-host'
  /** The connection could not be made or was lost: the server is away, or the network. */
  | 'transport'
  /**
   * The server answered but is not the primary: a hot standby, a server in recovery, or one set
   * read-only (a demoted primary, a replica a router or a stale DNS name still points at). Retried:
   * during a failover the router moves on; the connection that landed there is not reused.
   */
  | 'read-only';

const CONFLICT_CODES = new Set(['40P01', '40001']);
const CONFLICT_ERRNOS = new Set([1213]);
// 1467 ER_AUTOINC_READ_FAILED is what InnoDB reports when the wait for its table-level
// AUTO-INC lock (INSERT … SELECT) ends in a deadlock or timeout; genuine counter exhaustion
// also reports it, which a bounded retry then surfaces.
const LOCK_TIMEOUT_CODES = new Set(['55P03']);
const LOCK_TIMEOUT_ERRNOS = new Set([1205, 1467]);
// 42P01 undefined_table (a missing sequence in nextval() too); 3F000 invalid_schema_name:
// idlease's own schema is created by migrate, so its absence means the same thing.
const MISSING_CODES = new Set(['42P01', '3F000', 'ER_NO_SUCH_TABLE']);
const MISSING_TEXT = /relation "?[^"]*"? does not exist|schema "[^"]*" does not exist|Table '[^']*' doesn't exist/i;
// 1045 a wrong password; 1698 a user that does not exist, or one whose plugin refuses it (unix_socket),
// connecting with no password; 1044 no rights on the database; PostgreSQL 28P01 a wrong password,
// 28000 a role that does not exist or that pg_hba.conf rejects.
const ACCESS_DENIED = new Set([
  'ER_ACCESS_DENIED_ERROR',
  'ER_ACCESS_DENIED_NO_PASSWORD_ERROR',
  'ER_DBACCESS_DENIED_ERROR',
  '28P01',
  '28000',
]);
const ACCESS_DENIED_ERRNOS = new Set([1044, 1045, 1698]);
const UNKNOWN_DATABASE = new Set(['ER_BAD_DB_ERROR', '3D000']);
// EAI_AGAIN, a resolver that did not answer, is the network being away, not a wrong name.
const UNKNOWN_HOST = new Set(['ENOTFOUND']);
// 25006 read_only_sql_transaction (a write on a hot standby); 1290 ER_OPTION_PREVENTS_STATEMENT
// (--read-only), 1836 ER_READ_ONLY_MODE, 1792 ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION.
const READ_ONLY_CODES = new Set(['25006', 'ER_OPTION_PREVENTS_STATEMENT', 'ER_READ_ONLY_MODE', 'ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION']);
const READ_ONLY_ERRNOS = new Set([1290, 1836, 1792]);
// 55000 is broad (object_not_in_prerequisite_state): only its "recovery is in progress" (a WAL
// function such as the instance check, run on a standby) means the same.
const IN_RECOVERY = /recovery is in progress/i;
const TRANSPORT = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'PROTOCOL_CONNECTION_LOST',
  '57P01',
  '57P03',
]);

const TLS_CODES = new Set([
  'HANDSHAKE_NO_SSL_SUPPORT',
  'ER_SECURE_TRANSPORT_REQUIRED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_SIGNATURE_FAILURE',
  'HOSTNAME_MISMATCH',
  'EPROTO',
]);
// MySQL 3159 and MariaDB 1940 (ER_SECURE_TRANSPORT_REQUIRED): a plain connection to a server that requires TLS.
const TLS_ERRNOS = new Set([3159, 1940]);
const TLS_TEXT =
  /server does not support SSL|does not support secure connection|no encryption|SSL (is )?required|secure transport|self[- ]signed certificate|unable to verify the first certificate|altnames/i;

export function classifyDriverError(err: unknown): DriverErrorKind | undefined {
  const e = err as { code?: unknown; errno?: unknown; message?: unknown; fatal?: unknown } | null;
  if (e === null || typeof e !== 'object') return undefined;
  const code = typeof e.code === 'string' ? e.code : undefined;
  const errno = typeof e.errno === 'number' ? e.errno : undefined;
  if ((code !== undefined && CONFLICT_CODES.has(code)) || (errno !== undefined && CONFLICT_ERRNOS.has(errno))) return 'conflict';
  if ((code !== undefined && LOCK_TIMEOUT_CODES.has(code)) || (errno !== undefined && LOCK_TIMEOUT_ERRNOS.has(errno)))
    return 'lock-timeout';
  if ((code !== undefined && MISSING_CODES.has(code)) || errno === 1146) return 'missing-relation';
  // 42703 undefined_column; 1054 ER_BAD_FIELD_ERROR.
  if (code === '42703' || code === 'ER_BAD_FIELD_ERROR' || errno === 1054) return 'missing-column';
  if ((code !== undefined && (TLS_CODES.has(code) || code.startsWith('ERR_SSL_'))) || (errno !== undefined && TLS_ERRNOS.has(errno)))
    return 'tls';
  if (TLS_TEXT.test(String(e.message)) && !(code !== undefined && TRANSPORT.has(code))) return 'tls';
  if ((code !== undefined && ACCESS_DENIED.has(code)) || (errno !== undefined && ACCESS_DENIED_ERRNOS.has(errno))) return 'access-denied';
  if ((code !== undefined && UNKNOWN_DATABASE.has(code)) || errno === 1049) return 'unknown-database';
  if (code !== undefined && UNKNOWN_HOST.has(code)) return 'unknown-host';
  if (code !== undefined && TRANSPORT.has(code)) return 'transport';
  if ((code !== undefined && READ_ONLY_CODES.has(code)) || (errno !== undefined && READ_ONLY_ERRNOS.has(errno))) return 'read-only';
  if (code === '55000' && IN_RECOVERY.test(String(e.message))) return 'read-only';
  // Narrow on purpose: a bare "does not exist" also matches PostgreSQL's unknown database
  // (3D000, caught above), which is a connection problem, not a migration to run.
  if (MISSING_TEXT.test(String(e.message))) return 'missing-relation';
  return undefined;
}

/** A statement that lost a race and was rolled back whole: running it again is safe. */
export const isConflict = (err: unknown): boolean => classifyDriverError(err) === 'conflict';

/** A conflict or a lock wait that ended: the server is alive, another try (here or elsewhere) may succeed. */
export function isLockConflict(err: unknown): boolean {
  const kind = classifyDriverError(err);
  return kind === 'conflict' || kind === 'lock-timeout';
}

/** "The table (or sequence) idlease needs is not there": what turns into NOT_MIGRATED. */
export const isMissingTable = (err: unknown): boolean => classifyDriverError(err) === 'missing-relation';

/** "The table is there but lacks a column this version uses": NOT_MIGRATED too (run migrate after upgrading). */
export const isMissingColumn = (err: unknown): boolean => classifyDriverError(err) === 'missing-column';

/** A connection that failed this way cannot be trusted again: a session pool drops it instead of reusing it. */
export function isTransportError(err: unknown): boolean {
  return classifyDriverError(err) === 'transport' || (err as { fatal?: unknown } | null)?.fatal === true;
}

/** The server is not the primary (a standby, a demoted or read-only server): the connection goes, the call is retried. */
export const isReadOnlyServer = (err: unknown): boolean => classifyDriverError(err) === 'read-only';
