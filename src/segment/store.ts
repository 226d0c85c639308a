import {
  giveBackSegment,
  insertSegmentRow,
  leaseSegment,
  readSegmentRow,
  segmentTarget,
  type SegmentTableRef,
} from '../dialects/segments.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { knexExecutor, poolExecutor, type KnexLike } from '../drivers/index.js';
import { DEFAULT_SEGMENT_TABLE, validateIdentifier } from '../identifiers.js';

/** What one lease statement did. */
export type SegmentLeaseResult =
  { readonly kind: 'leased'; readonly end: bigint } | { readonly kind: 'unknown' } | { readonly kind: 'full'; readonly maxId: bigint };

/**
 * What the allocator needs from a database: four small operations, each one statement.
 * The allocator never sees SQL or a driver; tests plug in an in-memory store. A store of your
 * own must pass `segmentStoreConformance` (idlease/testing).
 */
export interface SegmentStore {
  /**
   * The tag's row (undefined when the tag has no row). `failoverGap`, when the store fences
   * failovers in its lease (every built-in store does), lets the allocator tell which of its leases
   * took the jump; a store without it is never said to jump.
   */
  read(tag: string): Promise<{ maxId: bigint; step: number; failoverGap?: bigint } | undefined>;
  /**
   * Atomically add `step` to max_id and answer the new value; on 'leased' the caller owns
   * (end − step, end]. 'full' when max_id + step would pass 2^63−1 (nothing changed).
   */
  lease(tag: string, step: number): Promise<SegmentLeaseResult>;
  /** Lower max_id from `expectedEnd` to `newMax` only if it is still exactly `expectedEnd`. */
  giveBack(tag: string, expectedEnd: bigint, newMax: bigint): Promise<boolean>;
  /** Insert the row if missing (max_id = first ID − 1); false if it already existed. */
  create(tag: string, maxId: bigint, step: number, description: string, failoverGap?: bigint): Promise<boolean>;
}

export interface SqlSegmentStoreOptions {
  /** Segment table. Default `idlease_segments`. */
  table?: string;
  /** PostgreSQL schema of the table. Default: the connection's search path. */
  schema?: string;
  /** Deadline for each statement, in ms. Default 5,000. */
  statementTimeoutMs?: number;
}

/** A store on a table reached through any client adapter: the one implementation behind knex and the raw pools. */
export function sqlSegmentStore(db: SqlExecutor, options: SqlSegmentStoreOptions): SegmentStore {
  const ref: SegmentTableRef = {
    table: validateIdentifier(options.table ?? DEFAULT_SEGMENT_TABLE, 'table'),
    schema: options.schema === undefined ? undefined : validateIdentifier(options.schema, 'schema'),
  };
  const t = segmentTarget(db, ref);
  const timeoutMs = options.statementTimeoutMs ?? 5_000;
  return Object.freeze({
    async read(tag: string) {
      const row = await readSegmentRow(t, tag, timeoutMs);
      return row && { maxId: row.maxId, step: row.step, failoverGap: row.failoverGap };
    },
    async lease(tag: string, step: number): Promise<SegmentLeaseResult> {
      const end = await leaseSegment(t, tag, step, timeoutMs);
      if (end !== undefined) return { kind: 'leased', end };
      const row = await readSegmentRow(t, tag, timeoutMs);
      return row ? { kind: 'full', maxId: row.maxId } : { kind: 'unknown' };
    },
    giveBack: (tag: string, expectedEnd: bigint, newMax: bigint) => giveBackSegment(t, tag, expectedEnd, newMax, timeoutMs),
    create: (tag: string, maxId: bigint, step: number, description: string, failoverGap?: bigint) =>
      insertSegmentRow(t, { tag, maxId, step, description, ...(failoverGap === undefined ? {} : { failoverGap }) }, timeoutMs),
  });
}

/** The segment store on a Knex instance (mysql2, pg or PGlite). */
export function createKnexSegmentStore(knex: KnexLike, options: SqlSegmentStoreOptions = {}): SegmentStore {
  return sqlSegmentStore(knexExecutor(knex), options);
}

/**
 * The segment store on a raw pool: a pg.Pool or Client, a mysql2 pool or promise pool, or a
 * postgres.js `sql` (told apart by shape; BAD_CONFIG for anything else). int8 is exact whatever
 * type parsers the pool has: values travel as text.
 */
export function createPoolSegmentStore(pool: unknown, options: SqlSegmentStoreOptions = {}): SegmentStore {
  return sqlSegmentStore(poolExecutor(pool), options);
}
