/**
 * An in-memory SegmentStore that behaves like the one-row-per-tag table, with knobs an
 * adversary wants: random latency, failures before the statement runs, and failures AFTER
 * it ran (the lease moved max_id but the answer was lost: that range must be abandoned).
 */
import type { SegmentLeaseResult, SegmentStore } from '../../src/segment/index.js';
import { MAX_INT64 } from '../../src/ids.js';
import { IdleaseError } from '../../src/errors.js';

export interface MemoryStoreKnobs {
  /** Random source in [0, 1). */
  random: () => number;
  maxDelayMs: number;
  /** Probability a call fails without effect. */
  failBefore: number;
  /** Probability a call takes effect and then reports failure. */
  failAfter: number;
}

export class MemoryStore implements SegmentStore {
  readonly rows = new Map<string, { maxId: bigint; step: number }>();
  /** Every range a lease statement granted, whether or not the caller heard the answer. */
  readonly granted: Array<{ tag: string; start: bigint; end: bigint }> = [];
  leaseCalls = 0;
  down = false;
  /** Behave like a store whose table was never created. */
  notMigrated = false;
  /** Tags whose calls hang (a row lock held elsewhere) until released or the deadline passes. */
  private readonly stalls = new Map<string, Promise<void>>();
  /** Deadline of a stalled call, like the SQL stores' statementTimeoutMs. */
  statementTimeoutMs = 5_000;

  constructor(public knobs: MemoryStoreKnobs = { random: Math.random, maxDelayMs: 0, failBefore: 0, failAfter: 0 }) {}

  /** Calls on `tag` hang until the returned function is called (the conformance suite's stall). */
  stall(tag: string): () => Promise<void> {
    let release!: () => void;
    this.stalls.set(tag, new Promise<void>((r) => (release = r)));
    return async () => {
      this.stalls.delete(tag);
      release();
    };
  }

  private async latency(tag: string): Promise<void> {
    if (this.notMigrated) throw new IdleaseError('NOT_MIGRATED', 'The memory store was created without its table (notMigrated).');
    const stalled = this.stalls.get(tag);
    if (stalled) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`statement did not answer within ${this.statementTimeoutMs} ms (statementTimeoutMs)`)),
          this.statementTimeoutMs,
        );
      });
      try {
        await Promise.race([stalled, deadline]);
      } finally {
        clearTimeout(timer);
      }
    }
    if (this.down) throw Object.assign(new Error('connect ECONNREFUSED (memory store is down)'), { code: 'ECONNREFUSED' });
    const ms = Math.floor(this.knobs.random() * (this.knobs.maxDelayMs + 1));
    await new Promise((r) => (ms === 0 ? setImmediate(r) : setTimeout(r, ms)));
    if (this.knobs.random() < this.knobs.failBefore) throw new Error('injected failure before the statement');
  }

  private after(): void {
    if (this.knobs.random() < this.knobs.failAfter) throw new Error('injected failure after the statement (answer lost)');
  }

  async read(tag: string) {
    await this.latency(tag);
    const row = this.rows.get(tag);
    return row && { ...row };
  }

  async lease(tag: string, step: number): Promise<SegmentLeaseResult> {
    this.leaseCalls++;
    await this.latency(tag);
    const row = this.rows.get(tag);
    if (!row) return { kind: 'unknown' };
    if (row.maxId > MAX_INT64 - BigInt(step)) return { kind: 'full', maxId: row.maxId };
    row.maxId += BigInt(step);
    this.granted.push({ tag, start: row.maxId - BigInt(step) + 1n, end: row.maxId });
    const end = row.maxId;
    this.after();
    return { kind: 'leased', end };
  }

  async giveBack(tag: string, expectedEnd: bigint, newMax: bigint): Promise<boolean> {
    await this.latency(tag);
    const row = this.rows.get(tag);
    if (!row || row.maxId !== expectedEnd) return false;
    row.maxId = newMax;
    this.after();
    return true;
  }

  async create(tag: string, maxId: bigint, step: number): Promise<boolean> {
    await this.latency(tag);
    if (this.rows.has(tag)) return false;
    this.rows.set(tag, { maxId, step });
    return true;
  }
}
