/**
 * An in-memory SegmentStore that behaves like the one-row-per-tag table, with knobs an
 * adversary wants: random latency, failures before the statement runs, and failures AFTER
 * it ran (the lease moved max_id but the answer was lost: that range must be abandoned).
 */
import type { SegmentLeaseResult, SegmentStore } from '../../src/segment/index.js';
import { MAX_INT64 } from '../../src/ids.js';

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

  constructor(public knobs: MemoryStoreKnobs = { random: Math.random, maxDelayMs: 0, failBefore: 0, failAfter: 0 }) {}

  private async latency(): Promise<void> {
    if (this.down) throw Object.assign(new Error('connect ECONNREFUSED (memory store is down)'), { code: 'ECONNREFUSED' });
    const ms = Math.floor(this.knobs.random() * (this.knobs.maxDelayMs + 1));
    await new Promise((r) => (ms === 0 ? setImmediate(r) : setTimeout(r, ms)));
    if (this.knobs.random() < this.knobs.failBefore) throw new Error('injected failure before the statement');
  }

  private after(): void {
    if (this.knobs.random() < this.knobs.failAfter) throw new Error('injected failure after the statement (answer lost)');
  }

  async read(tag: string) {
    await this.latency();
    const row = this.rows.get(tag);
    return row && { ...row };
  }

  async lease(tag: string, step: number): Promise<SegmentLeaseResult> {
    this.leaseCalls++;
    await this.latency();
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
    await this.latency();
    const row = this.rows.get(tag);
    if (!row || row.maxId !== expectedEnd) return false;
    row.maxId = newMax;
    this.after();
    return true;
  }

  async create(tag: string, maxId: bigint, step: number): Promise<boolean> {
    await this.latency();
    if (this.rows.has(tag)) return false;
    this.rows.set(tag, { maxId, step });
    return true;
  }
}
