import { InvalidArgumentError, type Command } from 'commander';
import type { Knex } from 'knex';
import { connect, DEFAULT_PGLITE_DIR } from '../connect.js';

export interface GlobalOptions {
  url?: string;
  json?: boolean;
}

/** The options every command inherits (`--url`, `--json`), read from the root program. */
export function globals(cmd: Command): GlobalOptions {
  return cmd.optsWithGlobals<GlobalOptions>();
}

/** Open the database the user named (or the embedded PGlite), run `fn`, always close. */
export async function withKnex<T>(cmd: Command, fn: (knex: Knex) => Promise<T>): Promise<T> {
  const { url } = globals(cmd);
  const knex = connect(url ?? process.env.IDLEASE_URL);
  try {
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
