import type { Knex } from 'knex';
import { flavorOf } from '../dialects/detect.js';
import {
  giveBackSegment, insertSegmentRow, leaseSegment, readSegmentRow,
  type SegmentLeaseResult, type SegmentTableRef,
} from '../dialects/segments.js';

/**
 * What the allocator needs from a database: four small operations, each one statement.
 * The allocator never sees SQL or a driver; tests plug in an in-memory store.
 */
export interface SegmentStore {
  /** The tag's row (undefined when the tag has no row). */
  read(tag: string): Promise<{ maxId: bigint; step: number } | undefined>;
  /** Atomically add `step` to max_id; on 'leased' the caller owns (end − step, end]. */
  lease(tag: string, step: number): Promise<SegmentLeaseResult>;
  /** Lower max_id from `expectedEnd` to `newMax` only if it is still exactly `expectedEnd`. */
  giveBack(tag: string, expectedEnd: bigint, newMax: bigint): Promise<boolean>;
  /** Insert the row if missing (max_id = first ID − 1); false if it already existed. */
  create(tag: string, maxId: bigint, step: number, description: string): Promise<boolean>;
}

export type { SegmentLeaseResult };

export function createKnexSegmentStore(knex: Knex, ref: SegmentTableRef, statementTimeoutMs: number): SegmentStore {
  const t = Object.freeze({ flavor: flavorOf(knex), ref });
  return Object.freeze({
    async read(tag: string) {
      const row = await readSegmentRow(knex, t, tag, statementTimeoutMs);
      return row && { maxId: row.maxId, step: row.step };
    },
    lease: (tag: string, step: number) => leaseSegment(knex, t, tag, step, statementTimeoutMs),
    giveBack: (tag: string, expectedEnd: bigint, newMax: bigint) => giveBackSegment(knex, t, tag, expectedEnd, newMax, statementTimeoutMs),
    create: (tag: string, maxId: bigint, step: number, description: string) =>
      insertSegmentRow(knex, t, { tag, maxId, step, description }, statementTimeoutMs),
  });
}
