import { ACCEPTED_POOLS, type KnexLike } from '../drivers/index.js';
import { IdleaseError } from '../errors.js';
import { validateIdentifier, validateWorkerTable } from '../identifiers.js';
import { exactlyOne, intOption, rejectUnknownKeys } from '../validate.js';
import { layoutPreset, resolveLayout, type IdLayout, type LayoutOptions, type LayoutPreset } from '../layout/index.js';
import { SYSTEM_CLOCK, type Clock } from '../runtime/clock.js';
import { createKnexWorkerIdStore, createPoolWorkerIdStore, type WorkerIdStore } from './worker-store.js';
import type { SnowflakeEvent } from './types.js';

/** Wall time for the ID's time field, monotonic time for the lease, and a way to wait. Injected by tests. */
export type SnowflakeClock = Clock;

export { SYSTEM_CLOCK };

export interface SnowflakeAllocatorOptions {
  /** The database holding `idlease_workers` (run `idlease migrate --workers`). Exactly one of `knex`, `pool` or `store`. */
  knex?: KnexLike;
  /**
   * A pool you already have instead of knex: a `pg.Pool` or `pg.Client`, a `mysql2` pool or
   * promise pool, or a postgres.js `sql`. The same statements and guarantees as `knex`.
   */
  pool?: unknown;
  /** A WorkerIdStore of your own (tests, other clients). */
  store?: WorkerIdStore;
  /** Worker-id group: allocators of one group share the id space. Default 'default'. */
  group?: string;
  /** A preset name ('idlease', 'twitter', 'sonyflake') or a layout. Default 'idlease'. */
  layout?: LayoutPreset | LayoutOptions | IdLayout;
  /** Worker table. Default idlease_workers. */
  table?: string;
  /** PostgreSQL schema of the table. Default `idlease`, where migrate installs it (`public` for an install kept where idlease 0.1 put it). MySQL: the connection's database. */
  schema?: string;
  /** How long a claim or renewal holds the worker id, by the database's clock. Default 10 000 ms. */
  leaseTtlMs?: number;
  /** How far the time field may run ahead of the wall clock (clock stepped back, sequence overflow). Default 1 000 ms. */
  maxLeadMs?: number;
  /** How long next() waits (for a lease, or for the clock) before rejecting. Default leaseTtlMs. */
  waitTimeoutMs?: number;
  /** How long close() waits for a claim or renewal in flight and for the release. Default 5 000 ms. */
  closeTimeoutMs?: number;
  onEvent?: (event: SnowflakeEvent) => void;
  clock?: SnowflakeClock;
}

export interface ResolvedSnowflakeOptions {
  readonly store: WorkerIdStore;
  readonly group: string;
  readonly layout: IdLayout;
  readonly table: string;
  readonly schema: string | undefined;
  readonly leaseTtlMs: number;
  readonly maxLeadMs: number;
  readonly waitTimeoutMs: number;
  readonly closeTimeoutMs: number;
  /** Fencing stops this long before the lease runs out: timers fire late, clocks drift. */
  readonly fenceMarginMs: number;
  readonly renewEveryMs: number;
  readonly onEvent: ((event: SnowflakeEvent) => void) | undefined;
  readonly clock: SnowflakeClock;
}

const KNOWN = [
  'knex',
  'pool',
  'store',
  'group',
  'layout',
  'table',
  'schema',
  'leaseTtlMs',
  'maxLeadMs',
  'waitTimeoutMs',
  'closeTimeoutMs',
  'onEvent',
  'clock',
];

function intIn(value: unknown, option: string, fallback: number, min: number, max: number): number {
  return intOption(value, option, { min, max, default: fallback, unit: 'milliseconds' });
}

export function resolveSnowflakeOptions(input: SnowflakeAllocatorOptions): ResolvedSnowflakeOptions {
  if (input === null || typeof input !== 'object') {
    throw new IdleaseError('BAD_CONFIG', 'createSnowflakeAllocator(options): options must be an object such as { knex }.');
  }
  rejectUnknownKeys(input, KNOWN, 'createSnowflakeAllocator');
  exactlyOne(
    input,
    ['knex', 'pool', 'store'],
    `createSnowflakeAllocator needs exactly one of \`knex\` (a Knex instance), \`pool\` (${ACCEPTED_POOLS}), both on a database with idlease_workers, or \`store\``,
  );
  const group = input.group ?? 'default';
  if (typeof group !== 'string' || group.length < 1 || group.length > 128) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `group must be a string of 1 to 128 characters, got ${JSON.stringify(group)}. Example: group: 'orders'.`,
      { cli: { message: `--group must be 1 to 128 characters, got ${JSON.stringify(group)}, e.g. --group orders.` } },
    );
  }
  const rawLayout = input.layout ?? 'idlease';
  const clock = input.clock ?? SYSTEM_CLOCK;
  const layout = typeof rawLayout === 'string' ? layoutPreset(rawLayout) : resolveLayout(rawLayout, clock.wallMs());
  const leaseTtlMs = intIn(input.leaseTtlMs, 'leaseTtlMs', 10_000, 100, 3_600_000);
  const maxLeadMs = intIn(input.maxLeadMs, 'maxLeadMs', 1_000, 0, 3_600_000);
  const waitTimeoutMs = intIn(input.waitTimeoutMs, 'waitTimeoutMs', leaseTtlMs, 1, 3_600_000);
  const closeTimeoutMs = intIn(input.closeTimeoutMs, 'closeTimeoutMs', 5_000, 0, 600_000);
  if (input.onEvent !== undefined && typeof input.onEvent !== 'function')
    throw new IdleaseError('BAD_CONFIG', 'onEvent must be a function.');
  const ref = {
    table: validateWorkerTable(input.table ?? 'idlease_workers', 'table'),
    schema: input.schema === undefined ? undefined : validateIdentifier(input.schema, 'schema'),
  };
  return Object.freeze({
    store: input.store ?? (input.knex !== undefined ? createKnexWorkerIdStore(input.knex, ref) : createPoolWorkerIdStore(input.pool, ref)),
    group,
    layout,
    ...ref,
    leaseTtlMs,
    maxLeadMs,
    waitTimeoutMs,
    closeTimeoutMs,
    fenceMarginMs: Math.max(10, Math.ceil(leaseTtlMs / 10)),
    renewEveryMs: Math.max(10, Math.floor(leaseTtlMs / 3)),
    onEvent: input.onEvent,
    clock,
  });
}
