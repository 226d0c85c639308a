import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { typedConnectionErrors } from '../dialects/connection-errors.js';
import type { SqlExecutor } from '../dialects/sql.js';
import {
  claimWorkerId,
  listWorkerRows,
  markWorkerInstance,
  releaseWorkerId,
  renewWorkerId,
  workerTarget,
  type WorkerClaim,
  type WorkerHolder,
  type WorkerRow,
  type WorkerTableRef,
} from '../dialects/workers.js';
import { knexExecutor, poolExecutor, type KnexLike } from '../drivers/index.js';

/**
 * What a snowflake allocator needs from a database to hold a worker id: three operations,
 * one statement each (the MySQL claim reads its outcome back by token), plus a listing for
 * errors and the CLI. The allocator never sees SQL; unit tests plug in an in-memory twin.
 */
export interface WorkerIdStore {
  /** Take the lowest id of the group (0…maxWorkerId) that is free or expired; undefined when none was taken. */
  claim(group: string, maxWorkerId: number, holder: WorkerHolder, ttlMs: number): Promise<WorkerClaim | undefined>;
  /** Extend our lease to the database's now + ttl and raise the recorded bound; false when the id is no longer ours. */
  renew(group: string, workerId: number, token: string, ttlMs: number, maxTimeMs: bigint): Promise<boolean>;
  /** Expire our lease now; the bound becomes the highest time we actually used (we issue nothing after). */
  release(group: string, workerId: number, token: string, usedMaxTimeMs: bigint): Promise<boolean>;
  list(group?: string): Promise<WorkerRow[]>;
  /**
   * Record that the worker table's history is complete on `instance` (the claim's): the allocator
   * calls it after waiting out a lease on an instance the marker did not name. Optional: a store
   * whose claims report no instance never needs it.
   */
  markInstance?(instance: string): Promise<void>;
}

export type { WorkerClaim, WorkerHolder, WorkerRow, WorkerTableRef };

/** Who is asking: this host and process, and a fresh token per claim. */
export function newHolder(startedAt = new Date()): WorkerHolder {
  return Object.freeze({ token: randomBytes(16).toString('hex'), host: hostname().slice(0, 255), pid: process.pid, startedAt });
}

/** The store on a worker table reached through any client adapter: the one implementation behind knex and the raw pools. */
export function sqlWorkerIdStore(db: SqlExecutor, ref: WorkerTableRef): WorkerIdStore {
  const t = workerTarget(db, ref);
  return Object.freeze({
    claim: (group: string, maxWorkerId: number, holder: WorkerHolder, ttlMs: number) => claimWorkerId(t, group, maxWorkerId, holder, ttlMs),
    renew: (group: string, workerId: number, token: string, ttlMs: number, maxTimeMs: bigint) =>
      renewWorkerId(t, group, workerId, token, ttlMs, maxTimeMs),
    release: (group: string, workerId: number, token: string, usedMaxTimeMs: bigint) =>
      releaseWorkerId(t, group, workerId, token, usedMaxTimeMs),
    markInstance: (instance: string) => markWorkerInstance(t, instance),
    // An admin read (workers list): one call, connection failures typed; claim/renew stay raw for the allocator's retry.
    list: (group?: string) => typedConnectionErrors(() => listWorkerRows(t, group)),
  });
}

/** The worker-id store on a Knex instance (mysql2, pg or PGlite). */
export function createKnexWorkerIdStore(knex: KnexLike, ref: WorkerTableRef): WorkerIdStore {
  return sqlWorkerIdStore(knexExecutor(knex), ref);
}

/** The worker-id store on a raw pool: a pg.Pool or Client, a mysql2 pool or promise pool, or a postgres.js `sql` (BAD_CONFIG for anything else). */
export function createPoolWorkerIdStore(pool: unknown, ref: WorkerTableRef): WorkerIdStore {
  return sqlWorkerIdStore(poolExecutor(pool), ref);
}
