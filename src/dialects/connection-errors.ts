import { IdleaseError } from '../errors.js';
import { backoffMs } from '../runtime/backoff.js';
import { SYSTEM_CLOCK } from '../runtime/clock.js';
import { settlesWithin } from '../runtime/deadline.js';
import { classifyDriverError } from './driver-errors.js';
import type { SqlExecutor } from './sql.js';

/**
 * What a driver error says about the connection, for messages and events: a wrong password,
 * a missing database or a host name that does not resolve is configuration (retrying will not
 * fix it until someone does), a refused or dropped connection is the database being away.
 * Read from the one classifier (driver-errors.ts): allocators' events, the CLI and admin calls use it.
 */
export type ConnectionProblem = 'access-denied' | 'unknown-database' | 'unknown-host' | 'tls' | 'unreachable' | 'not-primary';

export function connectionProblem(err: unknown): ConnectionProblem | undefined {
  const kind = classifyDriverError(err);
  if (kind === 'transport') return 'unreachable';
  if (kind === 'read-only') return 'not-primary';
  return kind === 'access-denied' || kind === 'unknown-database' || kind === 'unknown-host' || kind === 'tls' ? kind : undefined;
}

/** A few words for a message: what the problem is and what to check. */
export function describeConnectionProblem(problem: ConnectionProblem): string {
  switch (problem) {
    case 'access-denied':
      return 'access denied: check the user and password in the connection URL (a server that requires TLS answers so to a plain connection too: see sslmode / ssl-mode)';
    case 'unknown-database':
      return 'unknown database: check the database name in the connection URL (create it, then run idlease migrate)';
    case 'unknown-host':
      return 'unknown host: check the host name in the connection URL';
    case 'tls':
      return 'TLS failed: the server has no TLS for an sslmode/ssl-mode that requires it, requires TLS the URL did not ask for, or its certificate did not verify against the CA (sslrootcert / ssl-ca) and host name; check the TLS settings in the connection URL';
    case 'unreachable':
      return 'the database is unreachable: check that it is running and reachable';
    case 'not-primary':
      return 'the server is read-only (a standby, or a primary being demoted): during a failover this passes once the router points at the new primary; otherwise point the URL at the primary';
  }
}

/** Whether a problem is the setup (fix it, then rerun) rather than the database being away. */
export function isConfigProblem(problem: ConnectionProblem | undefined): boolean {
  return problem === 'access-denied' || problem === 'unknown-database' || problem === 'unknown-host' || problem === 'tls';
}

/**
 * A driver error as the IdleaseError a caller can branch on: BAD_CONFIG for a wrong password,
 * database or host, DB_UNAVAILABLE for a server that cannot be reached; anything else (an
 * IdleaseError already, or an error this does not recognise) is returned as it is. `target`
 * names the database in the message (a redacted URL, or words such as "the database").
 * For one-shot calls (admin, migrate); allocators keep retrying raw errors on their own bound.
 */
export function typedConnectionError(err: unknown, target = 'the database'): unknown {
  if (err instanceof IdleaseError) return err;
  const problem = connectionProblem(err);
  if (problem === undefined) return err;
  const driver = (err as Error)?.message ?? String(err);
  if (isConfigProblem(problem)) {
    return new IdleaseError('BAD_CONFIG', `cannot use ${target}: ${describeConnectionProblem(problem)} (${driver}).`, { cause: err });
  }
  if (problem === 'not-primary') {
    return new IdleaseError(
      'DB_UNAVAILABLE',
      `${target} cannot take writes now (${driver}): ${describeConnectionProblem(problem)}; then retry.`,
      {
        cause: err,
      },
    );
  }
  return new IdleaseError('DB_UNAVAILABLE', `cannot reach ${target} (${driver}): check that it is running and reachable, then retry.`, {
    cause: err,
  });
}

/** Run a one-shot database call and rethrow its connection failures typed (typedConnectionError). */
export async function typedConnectionErrors<T>(call: () => Promise<T>, target?: string): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw typedConnectionError(err, target);
  }
}

/**
 * connectionError, retried while the server is unreachable, for at most `boundMs` in all:
 * the bound a one-shot command waits for a database that is restarting. A configuration
 * problem (or an answer) ends the wait at once.
 */
export async function connectionErrorWithin(db: SqlExecutor, boundMs: number): Promise<unknown> {
  const deadline = Date.now() + boundMs;
  let last: unknown;
  for (let attempt = 0; ; attempt++) {
    // A slow answer is not "unreachable" (the allocators wait for that on their own bounds):
    // the first probe gets 3 s whatever the bound, later ones what is left of it — and a later
    // one cut short by the bound leaves the refusal that came before it standing.
    const r = await probe(db, attempt === 0 ? 3000 : Math.max(1, Math.min(3000, deadline - Date.now())));
    if (r === 'ok') return undefined;
    if (r === 'late') return last;
    if (connectionProblem(r.error) !== 'unreachable') return r.error;
    last = r.error;
    const pause = Math.min(backoffMs(attempt, 100, 1000), deadline - Date.now());
    if (pause <= 0) return last;
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
}

/**
 * One round trip to see whether the connection works at all. Resolves to the driver's error,
 * or undefined when the database answered or did not answer within `timeoutMs` (a slow
 * server is the allocators' business: they wait and retry on their own bounds).
 */
export async function connectionError(db: SqlExecutor, timeoutMs: number): Promise<unknown> {
  const r = await probe(db, timeoutMs);
  return r === 'ok' || r === 'late' ? undefined : r.error;
}

/** One `SELECT 1` within `timeoutMs`: answered, not yet answered, or the driver's error. */
export async function probe(db: SqlExecutor, timeoutMs: number): Promise<'ok' | 'late' | { error: unknown }> {
  const answer = db.run('SELECT 1', []).then(
    () => 'ok' as const,
    (error: unknown) => ({ error }),
  );
  return (await settlesWithin(answer, timeoutMs, SYSTEM_CLOCK, true)) ? answer : 'late';
}
