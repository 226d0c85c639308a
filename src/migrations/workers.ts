import type { Flavor } from '../dialects/detect.js';
import { workerTableDdl } from '../dialects/workers.js';
import { validateIdentifier } from '../identifiers.js';
import { runAll, type IdleaseMigration } from './types.js';

export const DEFAULT_WORKER_TABLE = 'idlease_workers';

export interface WorkersMigrateOptions {
  /** Table name. Default `idlease_workers`. */
  table?: string;
}

export interface ResolvedWorkers {
  readonly table: string;
}

/** Opt-in, as tickets: only snowflake allocators use the table. */
export function resolveWorkersOptions(input: boolean | WorkersMigrateOptions | undefined): ResolvedWorkers | undefined {
  if (input === undefined || input === false) return undefined;
  const opts = input === true ? {} : input;
  return Object.freeze({ table: validateIdentifier(opts.table ?? DEFAULT_WORKER_TABLE, 'workers.table') });
}

export function workersMigrations(flavor: Flavor, schema: string | undefined, opts: ResolvedWorkers): IdleaseMigration[] {
  const ddl = workerTableDdl(flavor, { schema, table: opts.table });
  return [{ name: `workers:${opts.table}`, up: (knex) => runAll(knex, ddl.up), down: (knex) => runAll(knex, ddl.down) }];
}
