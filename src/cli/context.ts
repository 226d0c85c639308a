import { InvalidArgumentError, type Command } from 'commander';
import type { Knex } from 'knex';
import { connect, DEFAULT_PGLITE_DIR, redact } from '../connect.js';
import { connectionError, connectionProblem, describeConnectionProblem } from '../dialects/connection-errors.js';
import { IdleaseError } from '../errors.js';

export interface GlobalOptions {
  url?: string;
  json?: boolean;
  verbose?: boolean;
}

/** The options every command inherits (`--url`, `--json`), read from the root program. */
export function globals(cmd: Command): GlobalOptions {
  return cmd.optsWithGlobals<GlobalOptions>();
}

/** A knex handle for a CLI command: knex's own log lines (stack traces included) only with --verbose. */
export function openDatabase(cmd: Command, url: string | undefined, poolMax?: number): Knex {
  const verbose = globals(cmd).verbose === true;
  return connect(url, { poolMax, log: (line) => { if (verbose) process.stderr.write(line + '\n'); } });
}

/**
 * A wrong password or database name will not fix itself: a one-shot command says so at once
 * instead of waiting out the allocators' retry bound and calling the database unavailable.
 */
export async function refuseBadConnection(knex: Knex, url: string | undefined): Promise<void> {
  const err = await connectionError(knex, 3000);
  const problem = connectionProblem(err);
  if (problem === 'access-denied' || problem === 'unknown-database') {
    throw new IdleaseError('BAD_CONFIG', `cannot use ${url ? redact(url) : 'the embedded PGlite'}: ${describeConnectionProblem(problem)} (${(err as Error).message}).`, { cause: err });
  }
}

/** Open the database the user named (or the embedded PGlite), run `fn`, always close. */
export async function withKnex<T>(cmd: Command, fn: (knex: Knex) => Promise<T>): Promise<T> {
  const url = globals(cmd).url ?? process.env.IDLEASE_URL;
  const knex = openDatabase(cmd, url);
  try {
    await refuseBadConnection(knex, url);
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

/** Parse a positive integer flag or argument; commander passes strings. */
export function positiveInt(name: string): (value: string) => number {
  return (value: string) => {
    if (!/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
      throw new InvalidArgumentError(`${name} must be a positive integer, got ${JSON.stringify(value)}.`);
    }
    return Number(value);
  };
}
