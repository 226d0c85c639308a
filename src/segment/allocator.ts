import { IdleaseError, isIdleaseError } from '../errors.js';
import { MAX_INT64 } from '../ids.js';
import { resolveSegmentOptions, type ResolvedSegmentOptions, type SegmentAllocatorOptions } from './options.js';
import { backoffMs } from '../backoff.js';
import { chooseStep, ewma, preloadHorizonMs, preloadThreshold } from './step-policy.js';
import { createKnexSegmentStore, type SegmentStore } from './store.js';
import type { SegmentAllocator, SegmentEvent, SegmentStats } from './types.js';

/** Beyond any ID: "no preload pending for this segment". */
const NEVER = MAX_INT64 + 1n;

interface Segment {
  readonly start: bigint;
  readonly end: bigint;
}

interface Waiter {
  /** IDs wanted; a single next() is need 1 with `batch` null. */
  readonly need: number;
  readonly batch: bigint[] | null;
  readonly resolve: (value: never) => void;
  readonly reject: (err: unknown) => void;
  timer: ReturnType<typeof setTimeout> | undefined;
  done: boolean;
}

/** Errors a retry cannot fix: callers hear them at once. */
function isFatal(err: unknown): boolean {
  return isIdleaseError(err, 'UNKNOWN_TAG') || isIdleaseError(err, 'NOT_MIGRATED') || isIdleaseError(err, 'EXHAUSTED') || isIdleaseError(err, 'INVARIANT') || isIdleaseError(err, 'BAD_CONFIG');
}

/**
 * Double-buffered segment allocator. The hot path is a bigint compare and increment on
 * fields of this object plus one resolved promise; everything that talks to the database
 * runs in one background loop per allocator (so at most one lease is in flight).
 *
 * State: the current segment [curStart, curEnd] served from `cursor` while cursor ≤ limit
 * (limit = curEnd, or frozen below cursor once close() starts), at most one preloaded
 * `spare`, and a FIFO of callers waiting while both are empty.
 */
class SegmentAllocatorImpl implements SegmentAllocator {
  readonly tag: string;
  private readonly o: ResolvedSegmentOptions;
  private readonly store: SegmentStore;

  private cursor = 1n;
  private limit = 0n;
  private curStart = 1n;
  private curEnd = 0n;
  private preloadAt = NEVER;
  private spare: Segment | null = null;
  /** End of the latest lease: every later lease must start above it. */
  private lastEnd = -1n;

  private readonly waiters: Waiter[] = [];
  private whead = 0;

  private loop: Promise<void> | null = null;
  private wantLease = false;
  private sleepTimer: ReturnType<typeof setTimeout> | undefined;
  private wakeSleep: (() => void) | undefined;
  private closing = false;
  private closed = false;
  private closePromise: Promise<void> | undefined;
  private exhausted: IdleaseError | undefined;

  private servedBefore = 0;
  private ratePerMs: number | undefined;
  private rateAt: number | undefined;
  private rateServed = 0;
  private latencyMs: number | undefined;

  private leases = 0;
  private leaseErrors = 0;
  private waits = 0;
  private timeouts = 0;
  private currentStep = 0;
  private rowStep: number | undefined;
  private lastLeaseAt: number | undefined;
  private lastLeaseMs: number | undefined;
  private givenBack = 0n;
  private lastError: unknown;

  constructor(o: ResolvedSegmentOptions) {
    this.o = o;
    this.tag = o.tag;
    this.store = o.store ?? createKnexSegmentStore(o.knex!, { schema: o.schema, table: o.table }, o.statementTimeoutMs);
  }

  next(): Promise<bigint> {
    const id = this.cursor;
    if (id <= this.limit) {
      this.cursor = id + 1n;
      if (id >= this.preloadAt) this.low();
      return Promise.resolve(id);
    }
    return this.slowNext();
  }

  nextBatch(n: number): Promise<bigint[]> {
    if (!Number.isSafeInteger(n) || n < 1 || n > this.o.maxBatch) {
      return Promise.reject(new IdleaseError('BAD_ARGUMENT', `nextBatch(n): n must be an integer from 1 to ${this.o.maxBatch} (maxBatch), got ${String(n)}.`));
    }
    const c0 = this.cursor;
    const last = c0 + BigInt(n) - 1n;
    if (last <= this.limit) {
      const out = new Array<bigint>(n);
      let c = c0;
      for (let i = 0; i < n; i++) out[i] = c++;
      this.cursor = c;
      if (last >= this.preloadAt) this.low();
      return Promise.resolve(out);
    }
    return this.slowBatch(n);
  }

  stats(): SegmentStats {
    let remaining = this.limit >= this.cursor ? this.limit - this.cursor + 1n : 0n;
    if (this.spare && !this.closing) remaining += this.spare.end - this.spare.start + 1n;
    return Object.freeze({
      tag: this.tag,
      leases: this.leases,
      leaseErrors: this.leaseErrors,
      waits: this.waits,
      timeouts: this.timeouts,
      served: this.served(),
      currentStep: this.currentStep,
      rowStep: this.rowStep,
      remaining,
      leaseInFlight: this.loop !== null,
      lastLeaseAt: this.lastLeaseAt,
      lastLeaseMs: this.lastLeaseMs,
      ratePerSecond: this.ratePerMs === undefined ? undefined : this.ratePerMs * 1000,
      givenBack: this.givenBack,
      lastError: this.lastError,
      closed: this.closed,
    });
  }

  close(): Promise<void> {
    this.closePromise ??= this.doClose();
    return this.closePromise;
  }

  // ---- slow paths -------------------------------------------------------------------

  private served(): number {
    return this.servedBefore + Number(this.cursor - this.curStart);
  }

  private emit(event: SegmentEvent): void {
    try {
      this.o.onEvent?.(event);
    } catch {
      // A broken metrics hook must not break allocation.
    }
  }

  private closedError(): IdleaseError {
    return new IdleaseError('CLOSED', `The segment allocator for tag ${JSON.stringify(this.tag)} was closed; create a new one.`);
  }

  private slowNext(): Promise<bigint> {
    if (this.closing) return Promise.reject(this.closedError());
    if (this.hasWaiters()) return this.enqueue(1, null) as Promise<bigint>;
    if (this.switchToSpare()) return this.next();
    if (this.exhausted) return Promise.reject(this.exhausted);
    return this.enqueue(1, null) as Promise<bigint>;
  }

  private slowBatch(n: number): Promise<bigint[]> {
    if (this.closing) return Promise.reject(this.closedError());
    const out: bigint[] = [];
    if (!this.hasWaiters()) {
      for (;;) {
        while (out.length < n && this.cursor <= this.limit) out.push(this.cursor++);
        if (out.length === n || !this.switchToSpare()) break;
      }
      if (this.cursor - 1n >= this.preloadAt) this.low();
      if (out.length === n) return Promise.resolve(out);
      if (this.exhausted) {
        // The IDs taken are abandoned, never handed out again.
        return Promise.reject(this.exhausted);
      }
    }
    return this.enqueue(n, out) as Promise<bigint[]>;
  }

  private hasWaiters(): boolean {
    while (this.whead < this.waiters.length && this.waiters[this.whead]!.done) this.whead++;
    if (this.whead === this.waiters.length && this.whead > 0) {
      this.waiters.length = 0;
      this.whead = 0;
    }
    return this.whead < this.waiters.length;
  }

  private enqueue(need: number, batch: bigint[] | null): Promise<unknown> {
    this.waits++;
    this.emit({ type: 'wait', tag: this.tag });
    const p = new Promise<unknown>((resolve, reject) => {
      const w: Waiter = { need, batch, resolve: resolve as (v: never) => void, reject, timer: undefined, done: false };
      w.timer = setTimeout(() => this.timeOut(w), this.o.waitTimeoutMs);
      this.waiters.push(w);
    });
    this.ensureLease();
    return p;
  }

  private timeOut(w: Waiter): void {
    if (w.done) return;
    w.done = true;
    this.timeouts++;
    const cause = this.lastError;
    const err = new IdleaseError(
      'DB_UNAVAILABLE',
      `No segment for tag ${JSON.stringify(this.tag)} within ${this.o.waitTimeoutMs} ms (waitTimeoutMs): memory is used up and ` +
        (cause ? `the lease keeps failing (${(cause as Error)?.message ?? String(cause)}). ` : 'the lease has not answered. ') +
        'Check that the database is reachable; the allocator keeps retrying and recovers by itself.',
      cause === undefined ? undefined : { cause },
    );
    this.emit({ type: 'timeout', tag: this.tag, error: err });
    w.reject(err);
  }

  private failWaiters(err: unknown): void {
    for (let i = this.whead; i < this.waiters.length; i++) {
      const w = this.waiters[i]!;
      if (w.done) continue;
      w.done = true;
      clearTimeout(w.timer);
      w.reject(err);
    }
    this.waiters.length = 0;
    this.whead = 0;
  }

  /** Serve waiting callers, oldest first, from the current segment. */
  private drain(): void {
    while (this.whead < this.waiters.length && this.cursor <= this.limit) {
      const w = this.waiters[this.whead]!;
      if (w.done) {
        this.whead++;
        continue;
      }
      if (w.batch === null) {
        const id = this.cursor;
        this.cursor = id + 1n;
        w.done = true;
        clearTimeout(w.timer);
        (w.resolve as (v: bigint) => void)(id);
        this.whead++;
        continue;
      }
      const b = w.batch;
      while (b.length < w.need && this.cursor <= this.limit) b.push(this.cursor++);
      if (b.length < w.need) break;
      w.done = true;
      clearTimeout(w.timer);
      (w.resolve as (v: bigint[]) => void)(b);
      this.whead++;
    }
    this.hasWaiters();
  }

  private demand(): number {
    let d = 0;
    for (let i = this.whead; i < this.waiters.length; i++) {
      const w = this.waiters[i]!;
      if (!w.done) d += w.batch === null ? 1 : w.need - w.batch.length;
    }
    return d;
  }

  /** Current segment used up and a spare ready: make it current. */
  private switchToSpare(): boolean {
    if (this.cursor <= this.limit || this.spare === null || this.closing) return false;
    const s = this.spare;
    this.spare = null;
    this.install(s);
    return true;
  }

  private install(s: Segment): void {
    this.servedBefore = this.served();
    this.curStart = s.start;
    this.cursor = s.start;
    this.curEnd = s.end;
    this.limit = s.end;
    this.preloadAt = NEVER;
    this.drain();
    if (this.cursor > this.limit) {
      this.wantLease = true;
      return;
    }
    const size = s.end - s.start + 1n;
    const threshold = preloadThreshold(size, this.ratePerMs, preloadHorizonMs(this.o.preloadMs, this.latencyMs));
    const at = this.curEnd - threshold;
    if (this.cursor - 1n >= at) this.low();
    else this.preloadAt = at;
  }

  /** The current segment is running low: lease the next one in the background. */
  private low(): void {
    this.preloadAt = NEVER;
    if (this.spare === null) this.ensureLease();
  }

  private ensureLease(): void {
    if (this.closing || this.exhausted) return;
    this.wantLease = true;
    if (this.loop !== null) return;
    this.loop = this.leaseLoop().finally(() => {
      this.loop = null;
    });
  }

  private async leaseLoop(): Promise<void> {
    let attempt = 0;
    while (this.wantLease && !this.closing) {
      this.wantLease = false;
      const started = Date.now();
      try {
        const seg = await this.leaseOnce(started);
        attempt = 0;
        this.lastError = undefined;
        this.accept(seg, Date.now() - started);
      } catch (err) {
        if (this.closing) return;
        if (isFatal(err)) {
          if (isIdleaseError(err, 'EXHAUSTED')) this.exhausted = err;
          this.lastError = err;
          this.failWaiters(err);
          return;
        }
        this.lastError = err;
        this.leaseErrors++;
        const delay = backoffMs(attempt++, this.o.retryMinMs, this.o.retryMaxMs);
        this.emit({ type: 'lease-error', tag: this.tag, error: err, attempt, retryInMs: delay });
        this.wantLease = true;
        await this.sleep(delay);
      }
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.wakeSleep = resolve;
      this.sleepTimer = setTimeout(resolve, ms);
    });
  }

  /** One lease: read the row's admin step, choose ours, move max_id by it in one statement. */
  private async leaseOnce(now: number): Promise<Segment> {
    const served = this.served();
    if (this.rateAt !== undefined) {
      this.ratePerMs = ewma(this.ratePerMs, (served - this.rateServed) / Math.max(1, now - this.rateAt));
    }
    this.rateAt = now;
    this.rateServed = served;

    let row = await this.store.read(this.tag);
    if (row === undefined && this.o.create) {
      const c = this.o.create;
      await this.store.create(this.tag, c.start - 1n, c.step, c.description);
      row = await this.store.read(this.tag);
    }
    if (row === undefined) throw this.unknownTag();
    this.rowStep = row.step;
    let step = chooseStep({
      rowStep: row.step,
      minStep: this.o.minStep,
      maxStep: this.o.maxStep,
      ratePerMs: this.ratePerMs,
      targetLeaseMs: this.o.targetLeaseMs,
      demand: this.demand(),
      previousStep: this.currentStep,
    });
    let res = await this.store.lease(this.tag, step);
    if (res.kind === 'full') {
      // Near 2^63−1: take what is left once, then EXHAUSTED. Never wrap.
      const left = MAX_INT64 - res.maxId;
      if (left > 0n && left < BigInt(step)) {
        step = Number(left);
        res = await this.store.lease(this.tag, step);
      }
    }
    if (res.kind === 'unknown') throw this.unknownTag();
    if (res.kind === 'full') {
      throw new IdleaseError(
        'EXHAUSTED',
        `Tag ${JSON.stringify(this.tag)} reached the largest 64-bit ID (max_id = ${res.maxId}); IDs never wrap. Use a new tag.`,
      );
    }
    const end = res.end;
    const start = end - BigInt(step) + 1n;
    if (start < 1n || end > MAX_INT64 || start <= this.lastEnd) {
      throw new IdleaseError(
        'INVARIANT',
        `Lease for tag ${JSON.stringify(this.tag)} returned (${start - 1n}, ${end}], which is not above this allocator's previous end ${this.lastEnd}; refusing to hand it out. ` +
          'Someone lowered max_id by hand? Raise it above every ID in use.',
      );
    }
    this.lastEnd = end;
    this.currentStep = step;
    return { start, end };
  }

  private unknownTag(): IdleaseError {
    return new IdleaseError(
      'UNKNOWN_TAG',
      `Tag ${JSON.stringify(this.tag)} has no row in ${this.o.table}. Add it: \`idlease tag add ${this.tag}\` (or addTag(knex, { tag: ${JSON.stringify(this.tag)} })), ` +
        'or pass create: { start, step } to createSegmentAllocator.',
    );
  }

  private accept(seg: Segment, ms: number): void {
    this.leases++;
    this.lastLeaseAt = Date.now();
    this.lastLeaseMs = ms;
    this.latencyMs = ewma(this.latencyMs, ms);
    this.emit({ type: 'lease', tag: this.tag, start: seg.start, end: seg.end, step: this.currentStep, ms });
    if (this.closing) {
      // Not served any more; kept only so close() can give it back.
      if (this.spare === null) this.spare = seg;
      return;
    }
    if (this.cursor > this.limit && this.spare === null) this.install(seg);
    else if (this.spare === null) this.spare = seg;
    else throw new IdleaseError('INVARIANT', 'segment allocator leased while a spare segment was buffered');
    if (this.hasWaiters()) this.wantLease = true;
  }

  private async doClose(): Promise<void> {
    this.closing = true;
    // Stop serving first: nothing handed out after this point can be given back by mistake.
    this.limit = this.cursor - 1n;
    this.preloadAt = NEVER;
    this.wantLease = false;
    this.failWaiters(this.closedError());
    clearTimeout(this.sleepTimer);
    this.wakeSleep?.();
    if (this.loop) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([this.loop, new Promise<void>((r) => (timer = setTimeout(r, this.o.closeTimeoutMs)))]);
      clearTimeout(timer);
    }
    try {
      await this.giveBack();
    } finally {
      this.closed = true;
    }
  }

  /**
   * Return the unused tail (G, E] where E is our latest lease's end, if max_id is still E.
   * (G, E] must be ours alone: the spare, plus the current segment's rest when the two are
   * adjacent. A failed compare-and-set means someone leased after us: the tail is abandoned.
   */
  private async giveBack(): Promise<void> {
    if (this.loop) return; // a lease still in flight: its end is unknown, so give nothing back
    const spare = this.spare;
    let end: bigint;
    let keep: bigint;
    if (spare) {
      end = spare.end;
      keep = this.curEnd + 1n === spare.start && this.cursor <= this.curEnd ? this.cursor - 1n : spare.start - 1n;
    } else {
      if (this.curEnd < this.curStart || this.cursor > this.curEnd) return;
      end = this.curEnd;
      keep = this.cursor - 1n;
    }
    if (keep >= end) return;
    let ok = false;
    try {
      ok = await this.store.giveBack(this.tag, end, keep);
    } catch (err) {
      this.lastError = err; // best effort: the tail is abandoned, which is always safe
    }
    if (ok) this.givenBack += end - keep;
    this.spare = null;
    this.emit({ type: 'give-back', tag: this.tag, from: end, to: keep, ok });
  }
}

/**
 * A segment allocator for one tag: `next()` hands IDs out of memory and leases the next
 * range of `step` IDs from the tag's row in the background, one statement per lease.
 */
export function createSegmentAllocator(options: SegmentAllocatorOptions): SegmentAllocator {
  return new SegmentAllocatorImpl(resolveSegmentOptions(options));
}
