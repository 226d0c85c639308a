import { MAX_ROW_STEP } from '../dialects/segments.js';
import type { Clock } from '../runtime/clock.js';
import { MAX_TAG_LENGTH, tagProblem } from '../tags.js';
import { IdleaseError } from '../errors.js';
import { MAX_INT64, unsafeNumberError } from '../ids.js';
import { DEFAULT_SEGMENT_TABLE, validateIdentifier } from '../identifiers.js';
import { clockOption, exactlyOne, intOption, rejectUnknownKeys } from '../validate.js';
import { ACCEPTED_POOLS, type KnexLike } from '../drivers/index.js';
import { createKnexSegmentStore, createPoolSegmentStore, type SegmentStore } from './store.js';
import type { SegmentEvent } from './types.js';

export interface SegmentAllocatorOptions {
  /** The database. Its pool is shared by every allocator made from it. Exactly one of `knex`, `pool` or `store`. */
  knex?: KnexLike;
  /**
   * A pool you already have instead of knex: a `pg.Pool` or `pg.Client`, a `mysql2` pool or
   * promise pool, or a postgres.js `sql`. The same statements and guarantees as `knex`; int8 is
   * read exactly whatever type parsers the pool has.
   */
  pool?: unknown;
  /** A store of your own (see `segmentStoreConformance` in idlease/testing). */
  store?: SegmentStore;
  /** The tag (row key): 1–128 characters. */
  tag: string;
  /** Segment table. Default `idlease_segments`. */
  table?: string;
  /** PostgreSQL schema of the table. Default `idlease`, where migrate installs it (`public` for an install kept where idlease 0.1 put it). MySQL: the connection's database. */
  schema?: string;
  /** Smallest lease this process asks for. Default 1. */
  minStep?: number;
  /** Largest lease this process asks for (≤ 2,147,483,647). Default 10,000,000. */
  maxStep?: number;
  /** How long one lease should last at the measured rate. Default 60,000 ms. */
  targetLeaseMs?: number;
  /** Start the next lease when the current segment would run out within this time. Default 1,000 ms. */
  preloadMs?: number;
  /** How long next()/nextBatch() wait for a segment when memory is empty before DB_UNAVAILABLE. Default 5,000 ms. */
  waitTimeoutMs?: number;
  /** Per-statement timeout for lease and give-back statements. Default 5,000 ms. */
  statementTimeoutMs?: number;
  /** Retry delays after a failed lease: doubling from `retryMinMs` to `retryMaxMs`. Defaults 25 and 2,000 ms. */
  retryMinMs?: number;
  retryMaxMs?: number;
  /** How long close() waits for a lease in flight before abandoning it. Default 5,000 ms. */
  closeTimeoutMs?: number;
  /** Largest nextBatch(n). Default 1,000,000. */
  maxBatch?: number;
  /**
   * Create the tag's row when it is missing (otherwise UNKNOWN_TAG). `start` is the first
   * ID handed out (default 1); `step` the row's admin step (default 1000).
   */
  create?: boolean | { start?: bigint | number | string; step?: number; description?: string };
  /** Called for leases, lease errors, waits, timeouts and give-backs (metrics, logs). Must not throw. */
  onEvent?: (event: SegmentEvent) => void;
  /**
   * Time for the lease loop: its backoff sleeps, lease latency (which sizes the step) and
   * `stats().lastLeaseAt`. Default the system clock; tests pass one they drive by hand. The
   * `waitTimeoutMs` and `statementTimeoutMs` bounds stay real timers.
   */
  clock?: Clock;
}

export interface ResolvedSegmentOptions {
  readonly store: SegmentStore;
  readonly tag: string;
  readonly table: string;
  readonly schema: string | undefined;
  readonly minStep: number;
  readonly maxStep: number;
  readonly targetLeaseMs: number;
  readonly preloadMs: number;
  readonly waitTimeoutMs: number;
  readonly statementTimeoutMs: number;
  readonly retryMinMs: number;
  readonly retryMaxMs: number;
  readonly closeTimeoutMs: number;
  readonly maxBatch: number;
  readonly create: Readonly<{ start: bigint; step: number; description: string }> | undefined;
  readonly onEvent: ((event: SegmentEvent) => void) | undefined;
  readonly clock: Clock;
}

/** Every option createSegmentAllocator reads (also the database side of createRedisSequence). */
export const SEGMENT_OPTION_KEYS = [
  'knex',
  'pool',
  'store',
  'tag',
  'table',
  'schema',
  'minStep',
  'maxStep',
  'targetLeaseMs',
  'preloadMs',
  'waitTimeoutMs',
  'statementTimeoutMs',
  'retryMinMs',
  'retryMaxMs',
  'closeTimeoutMs',
  'maxBatch',
  'create',
  'onEvent',
  'clock',
] as const;

/** Where the tag's row is: one of these options. */
export const DATABASE_KEYS = ['knex', 'pool', 'store'] as const;

function int(value: unknown, name: string, def: number, min: number, max: number): number {
  return intOption(value, name, { min, max, default: def });
}

/** A tag's text checked (BAD_ARGUMENT; src/tags.ts says what a tag may be): for tags that arrive as input (HTTP paths, CLI arguments). */
export function validateTagText(tag: string, what = 'tag'): string {
  const problem = tagProblem(tag);
  if (problem !== undefined) {
    throw new IdleaseError('BAD_ARGUMENT', `${what} ${JSON.stringify(tag.slice(0, 40))} ${problem}.`, {
      cli: { message: `The tag ${JSON.stringify(tag.slice(0, 40))} ${problem}, e.g. order or user_events.` },
    });
  }
  return tag;
}

/**
 * A tag option checked: not a string is the program's mistake (BAD_CONFIG); a string that is no
 * tag — too long, empty, invisible characters — is BAD_ARGUMENT like every other tag error,
 * however it arrived (a 129-character tag was BAD_CONFIG, a tag with a control character BAD_ARGUMENT).
 */
export function validateTag(tag: unknown, what = 'tag'): string {
  if (typeof tag !== 'string') {
    const got = JSON.stringify(tag);
    throw new IdleaseError(
      'BAD_CONFIG',
      `${what} must be a string of 1 to ${MAX_TAG_LENGTH} printable characters, got ${got}. Example: tag: 'order'.`,
      { cli: { message: `A tag is 1 to ${MAX_TAG_LENGTH} printable characters, got ${got}, e.g. order or user_events.` } },
    );
  }
  return validateTagText(tag, what);
}

export function validateRowStep(step: unknown, what = 'step'): number {
  return int(step, what, 1000, 1, MAX_ROW_STEP);
}

/** The first ID a new tag hands out; its row starts at max_id = start − 1. */
export function validateStart(start: unknown, what = 'start'): bigint {
  let v: bigint | undefined;
  if (start === undefined) v = 1n;
  else if (typeof start === 'bigint') v = start;
  else if (typeof start === 'number' && Number.isSafeInteger(start)) v = BigInt(start);
  else if (typeof start === 'number' && Number.isInteger(start)) throw unsafeNumberError(start, what);
  else if (typeof start === 'string' && /^\d+$/.test(start)) v = BigInt(start);
  if (v === undefined || v < 1n || v > MAX_INT64) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${what} must be an integer from 1 to ${MAX_INT64} (the first ID to hand out), got ${String(start)}.`,
    );
  }
  return v;
}

export function resolveSegmentOptions(options: SegmentAllocatorOptions): ResolvedSegmentOptions {
  if (options === null || typeof options !== 'object') {
    throw new IdleaseError('BAD_CONFIG', "createSegmentAllocator(options): options must be an object, e.g. { knex, tag: 'order' }.");
  }
  rejectUnknownKeys(options, SEGMENT_OPTION_KEYS, 'createSegmentAllocator');
  exactlyOne(
    options,
    DATABASE_KEYS,
    `createSegmentAllocator needs exactly one of \`knex\` (a Knex instance), \`pool\` (${ACCEPTED_POOLS}) or \`store\``,
  );
  const minStep = int(options.minStep, 'minStep', 1, 1, MAX_ROW_STEP);
  const maxStep = int(options.maxStep, 'maxStep', Math.max(minStep, 10_000_000), 1, MAX_ROW_STEP);
  if (maxStep < minStep) throw new IdleaseError('BAD_CONFIG', `maxStep (${maxStep}) must be at least minStep (${minStep}).`);
  const retryMinMs = int(options.retryMinMs, 'retryMinMs', 25, 1, 60_000);
  const retryMaxMs = int(options.retryMaxMs, 'retryMaxMs', Math.max(retryMinMs, 2_000), retryMinMs, 600_000);
  let create: ResolvedSegmentOptions['create'];
  if (options.create !== undefined && options.create !== false) {
    const c = options.create === true ? {} : options.create;
    if (c === null || typeof c !== 'object')
      throw new IdleaseError('BAD_CONFIG', 'create must be true or { start?, step?, description? }.');
    create = Object.freeze({
      start: validateStart(c.start, 'create.start'),
      step: validateRowStep(c.step, 'create.step'),
      description: typeof c.description === 'string' ? c.description.slice(0, 256) : '',
    });
  }
  if (options.onEvent !== undefined && typeof options.onEvent !== 'function') {
    throw new IdleaseError('BAD_CONFIG', 'onEvent must be a function (event) => void.');
  }
  const table = validateIdentifier(options.table ?? DEFAULT_SEGMENT_TABLE, 'table');
  const schema = options.schema === undefined ? undefined : validateIdentifier(options.schema, 'schema');
  const statementTimeoutMs = int(options.statementTimeoutMs, 'statementTimeoutMs', 5_000, 1, 600_000);
  const sqlOptions = { table, schema, statementTimeoutMs };
  return Object.freeze({
    store:
      options.store ??
      (options.knex !== undefined ? createKnexSegmentStore(options.knex, sqlOptions) : createPoolSegmentStore(options.pool, sqlOptions)),
    tag: validateTag(options.tag),
    table,
    schema,
    minStep,
    maxStep,
    targetLeaseMs: int(options.targetLeaseMs, 'targetLeaseMs', 60_000, 1, 86_400_000),
    preloadMs: int(options.preloadMs, 'preloadMs', 1_000, 0, 3_600_000),
    waitTimeoutMs: int(options.waitTimeoutMs, 'waitTimeoutMs', 5_000, 1, 600_000),
    statementTimeoutMs,
    retryMinMs,
    retryMaxMs,
    closeTimeoutMs: int(options.closeTimeoutMs, 'closeTimeoutMs', 5_000, 0, 600_000),
    maxBatch: int(options.maxBatch, 'maxBatch', 1_000_000, 1, 100_000_000),
    create,
    onEvent: options.onEvent,
    clock: clockOption(options.clock),
  });
}
