import type { Knex } from 'knex';
import { ownObjectName, type Flavor } from '../dialects/detect.js';
import { instanceMarkerDdl, liveWorkerLeases, workerTableDdl } from '../dialects/workers.js';
import { knexExecutor } from '../drivers/knex.js';
import { validateWorkerTable } from '../identifiers.js';
import { runAll, someOf, stateLossError, type IdleaseMigration } from './types.js';

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
  return Object.freeze({ table: validateWorkerTable(opts.table ?? DEFAULT_WORKER_TABLE, 'workers.table') });
}

export function workersMigrations(
  flavor: Flavor,
  schema: string | undefined,
  opts: ResolvedWorkers,
  dropState = false,
): IdleaseMigration[] {
  const ref = { schema, table: opts.table };
  const ddl = workerTableDdl(flavor, ref);
  // A live lease is a running process making IDs with its worker id: without the row, another
  // process could claim the same id and make the same IDs.
  const refuseDown = async (knex: Knex): Promise<void> => {
    if (dropState) return;
    const live = await liveWorkerLeases(knexExecutor(knex), ref);
    if (live.length === 0) return;
    throw stateLossError(
      `the worker table ${ownObjectName(flavor, schema, opts.table)}`,
      `${live.length} worker id(s) are leased by running processes (${someOf(live.map((w) => `${w.group}/${w.workerId} held by ${w.host} pid ${w.pid} until ${w.leaseExpiresAt.toISOString()}`))}); stop them first`,
    );
  };
  return [
    {
      name: `workers:${opts.table}`,
      up: (knex) => runAll(knex, ddl.up),
      refuseDown,
      down: async (knex) => {
        await refuseDown(knex);
        await runAll(knex, ddl.down);
      },
    },
    {
      // Version 2 (issue 24): the instance marker beside the worker table. A fresh install gets it
      // from the entry above (marked, since the new table holds no lease); on an install made
      // before, this creates it empty: the first claim does not know whether a failover lost
      // anything and waits out one lease, once. CREATE … IF NOT EXISTS: a no-op after the entry above.
      name: `workers:${opts.table}:v2`,
      up: (knex) => runAll(knex, instanceMarkerDdl(flavor, ref).up),
      // Refuses as the entry above does, so a refused down leaves both entries recorded; the
      // entry above drops both tables.
      refuseDown,
      down: (knex) => refuseDown(knex),
    },
  ];
}
