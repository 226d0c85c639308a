import type { Knex } from 'knex';
import { SYSTEM_CLOCK } from '../runtime/clock.js';
import { settlesWithin } from '../runtime/deadline.js';

/**
 * What a driver error says about the connection, for messages and events: a wrong password
 * or a missing database is configuration (retrying will not fix it until someone does),
 * a refused or dropped connection is the database being away.
 */
export type ConnectionProblem = 'access-denied' | 'unknown-database' | 'unreachable';

const ACCESS_DENIED = new Set(['ER_ACCESS_DENIED_ERROR', 'ER_DBACCESS_DENIED_ERROR', '28P01', '28000']);
const UNKNOWN_DATABASE = new Set(['ER_BAD_DB_ERROR', '3D000']);
const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EHOSTUNREACH', 'ETIMEDOUT', 'EPIPE', 'PROTOCOL_CONNECTION_LOST', '57P01', '57P03']);

export function connectionProblem(err: unknown): ConnectionProblem | undefined {
  const e = err as { code?: unknown; errno?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : undefined;
  if (code === undefined) return undefined;
  if (ACCESS_DENIED.has(code) || e?.errno === 1045) return 'access-denied';
  if (UNKNOWN_DATABASE.has(code) || e?.errno === 1049) return 'unknown-database';
  if (UNREACHABLE.has(code)) return 'unreachable';
  return undefined;
}

/** A few words for a message: what the problem is and what to check. */
export function describeConnectionProblem(problem: ConnectionProblem): string {
  switch (problem) {
    case 'access-denied':
      return 'access denied: check the user and password in the connection URL';
    case 'unknown-database':
      return 'unknown database: check the database name in the connection URL (create it, then run idlease migrate)';
    case 'unreachable':
      return 'the database is unreachable: check that it is running and reachable';
  }
}

/**
 * One round trip to see whether the connection works at all. Resolves to the driver's error,
 * or undefined when the database answered or did not answer within `timeoutMs` (a slow
 * server is the allocators' business: they wait and retry on their own bounds).
 */
export async function connectionError(knex: Knex, timeoutMs: number): Promise<unknown> {
  const answer = knex.raw('SELECT 1').then(() => undefined, (err: unknown) => err);
  return (await settlesWithin(answer, timeoutMs, SYSTEM_CLOCK, true)) ? answer : undefined;
}
