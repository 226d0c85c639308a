import { InvalidArgumentError, type Command } from 'commander';
import type { Knex } from 'knex';
import { connect, DEFAULT_PGLITE_DIR, redact } from '../connect.js';
import { connectionErrorWithin, connectionProblem, describeConnectionProblem, isConfigProblem } from '../dialects/connection-errors.js';
import { IdleaseError } from '../errors.js';

export interface GlobalOptions {
  url?: string;
  json?: boolean;
  verbose?: boolean;
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
export function openDatabase(cmd: Command, url: string | undefined, poolMax?: number): Knex {
  const verbose = globals(cmd).verbose === true;
  return connect(url, { poolMax, connectTimeoutMs: waitMs(cmd), log: (line) => { if (verbose) process.stderr.write(line + '\n'); } });
}

/**
 * A wrong password, database or host name will not fix itself: a one-shot command says so at
 * once instead of waiting out the allocators' retry bound and calling the database unavailable.
 * A server that refuses connections is retried for `waitForMs` (--wait) and then named as
 * DB_UNAVAILABLE, unless `unreachableIsFatal` is false (one ticket server of several may be down).
 */
export async function refuseBadConnection(knex: Knex, url: string | undefined, waitForMs = DEFAULT_WAIT_MS, unreachableIsFatal = true): Promise<void> {
  const err = await connectionErrorWithin(knex, unreachableIsFatal ? waitForMs : 0);
  const problem = connectionProblem(err);
  const target = url ? redact(url) : 'the embedded PGlite';
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

export function formatSeconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`;
}

/** Open the database the user named (or the embedded PGlite), run `fn`, always close. */
export async function withKnex<T>(cmd: Command, fn: (knex: Knex) => Promise<T>): Promise<T> {
  const url = globals(cmd).url ?? process.env.IDLEASE_URL;
  const knex = openDatabase(cmd, url);
  try {
    await refuseBadConnection(knex, url, waitMs(cmd));
    return await fn(knex);
  } finally {
    await knex.destroy();
  }
}

export function describeTarget(cmd: Command): string {
  const { url } = globals(cmd);
  return url ?? process.env.IDLEASE_URL ?? `embedded PGlite in ./${DEFAULT_PGLITE_DIR}/`;
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
    throw new InvalidArgumentError(`--wait must be a number of seconds from 0.001 to 3600, got ${JSON.stringify(value)}.`);
  }
  return Math.max(1, Math.round(Number(value) * 1000));
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
