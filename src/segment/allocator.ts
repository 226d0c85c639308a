import { connectionProblem, describeConnectionProblem } from '../dialects/connection-errors.js';
import { IdleaseError, isIdleaseError, isRetryable } from '../errors.js';
import { MAX_INT64 } from '../ids.js';
import { resolveSegmentOptions, type ResolvedSegmentOptions, type SegmentAllocatorOptions } from './options.js';
import { Emitter } from '../runtime/events.js';
import { BackgroundTask } from '../runtime/task.js';
import { leaseErrorEvent, SegmentLeaser, type Lease } from './lease.js';
import type { SegmentStore } from './store.js';
import { SEGMENT_LEASE_RETRIED, type IdRange, type SegmentAllocator, type SegmentEvent, type SegmentStats } from './types.js';
import { WaiterQueue } from './waiters.js';

/** Beyond any ID: "no preload pending for this segment". */
const NEVER = MAX_INT64 + 1n;

interface Segment {
  readonly start: bigint;
  readonly end: bigint;
}

/** Errors a retry cannot fix: callers hear them at once. */
const isFatal = (err: unknown): boolean => !isRetryable(err, SEGMENT_LEASE_RETRIED);

/**
 * Test runs set IDLEASE_ASSERT_STATE=1: the allocator then checks its state machine after
 * every slow-path step and fails loudly (INVARIANT) instead of stalling until a timeout.
 */
const ASSERT_STATE = process.env.IDLEASE_ASSERT_STATE === '1';

/**
 * Double-buffered segment allocator. The hot path is a bigint compare and increment on
 * fields of this object plus one resolved promise; everything that talks to the database
 * runs in one background loop per allocator (so at most one lease is in flight).
 *
 * State: the current segment [curStart, curEnd] served from `cursor` while cursor ≤ limit
 * (limit = curEnd, or frozen below cursor once close() starts), at most one preloaded
 * `spare`, and a FIFO of callers waiting while both are empty. Waiters exist only while
 * memory is empty, and then a lease is always in flight or being retried: `leaseNeeded()`
 * is the one rule for both starting the loop and letting it end, and the loop clears
 * `leasing` in the same synchronous step as its last check, so no caller can slip in
 * between (a late cleanup after the loop's promise settled once let one do so).
 */
class SegmentAllocatorImpl implements SegmentAllocator {
  readonly tag: string;
  private readonly options: ResolvedSegmentOptions;
  private readonly store: SegmentStore;

  private cursor = 1n;
  private limit = 0n;
  private curStart = 1n;
  private curEnd = 0n;
  private preloadAt = NEVER;
  private spare: Segment | null = null;

  private readonly waiters = new WaiterQueue();
  private readonly events: Emitter<SegmentEvent>;
  /** The one background loop: leases while leaseNeeded(), retries with backoff, bounded on close. */
  private readonly leaseTask: BackgroundTask;
  /** The lease rule (lease.ts), shared with the Redis sequence: row, step, full, regression, jump, averages. */
  private readonly rule: SegmentLeaser;

  private preloadWanted = false;
  private leaseStartedAt = 0;
  private closing = false;
  private closed = false;
  private closePromise: Promise<void> | undefined;
  private exhausted: IdleaseError | undefined;

  private servedBefore = 0;

  private leases = 0;
  private leaseErrors = 0;
  private waits = 0;
  private timeouts = 0;
  private regressions = 0;
  private failoverJumps = 0;
  private currentStep = 0;
  private lastLeaseAt: number | undefined;
  private lastLeaseMs: number | undefined;
  private givenBack = 0n;
  private lastError: unknown;

  constructor(options: ResolvedSegmentOptions) {
    this.options = options;
    this.tag = options.tag;
    this.store = options.store;
    this.events = new Emitter(options.onEvent);
    this.rule = new SegmentLeaser(options, {
      creator: 'createSegmentAllocator',
      regressions: 'rule',
      regression: (r) => {
        this.regressions++;
        this.emit({ type: 'regression', tag: this.tag, ...r });
      },
      jump: (j) => {
        this.failoverJumps++;
        this.emit({ type: 'failover-jump', tag: this.tag, ...j });
      },
    });
    this.leaseTask = new BackgroundTask({
      wanted: () => this.leaseNeeded(),
      step: () => this.leaseStep(),
      failed: (err, attempt, retryInMs) => this.leaseFailed(err, attempt, retryInMs),
      ended: () => this.checkState('lease loop ended'),
      backoff: { minMs: options.retryMinMs, maxMs: options.retryMaxMs },
      clock: options.clock,
    });
  }

  /** A lease is in flight, or being retried. */
  private get leasing(): boolean {
    return this.leaseTask.running;
  }

  next(): Promise<bigint> {
    const id = this.nextInMemory();
    return id === undefined ? this.slowNext() : Promise.resolve(id);
  }

  nextInMemory(): bigint | undefined {
    const id = this.cursor;
    if (id > this.limit) return undefined;
    this.cursor = id + 1n;
    if (id >= this.preloadAt) this.preloadSoon();
    return id;
  }

  private badBatch(n: number, method: string): Promise<never> | undefined {
    if (Number.isSafeInteger(n) && n >= 1 && n <= this.options.maxBatch) return undefined;
    return Promise.reject(
      new IdleaseError(
        'BAD_ARGUMENT',
        `${method}(n): n must be an integer from 1 to ${this.options.maxBatch} (maxBatch), got ${String(n)}.`,
      ),
    );
  }

  nextRanges(n: number): Promise<IdRange[]> {
    const bad = this.badBatch(n, 'nextRanges');
    if (bad) return bad;
    const start = this.cursor;
    const end = start + BigInt(n) - 1n;
    if (end <= this.limit) {
      this.cursor = end + 1n;
      if (end >= this.preloadAt) this.preloadSoon();
      return Promise.resolve([{ start, end }]);
    }
    // Across a segment boundary (once per segment at most): the batch path, folded into ranges.
    return this.slowBatch(n).then(toRanges);
  }

  nextBatch(n: number): Promise<bigint[]> {
    const bad = this.badBatch(n, 'nextBatch');
    if (bad) return bad;
    const c0 = this.cursor;
    const last = c0 + BigInt(n) - 1n;
    if (last <= this.limit) {
      const out = new Array<bigint>(n);
      let c = c0;
      for (let i = 0; i < n; i++) out[i] = c++;
      this.cursor = c;
      if (last >= this.preloadAt) this.preloadSoon();
      return Promise.resolve(out);
    }
    return this.slowBatch(n);
  }

  stats(): SegmentStats {
    let remaining = this.limit >= this.cursor ? this.limit - this.cursor + 1n : 0n;
    if (this.spare && !this.closing) remaining += this.spare.end - this.spare.start + 1n;
    return Object.freeze({
      kind: 'segment',
      tag: this.tag,
      leases: this.leases,
      leaseErrors: this.leaseErrors,
      waits: this.waits,
      timeouts: this.timeouts,
      regressions: this.regressions,
      failoverJumps: this.failoverJumps,
      served: this.served(),
      currentStep: this.currentStep,
      rowStep: this.rule.rowStep,
      remaining,
      // What the status page shows per tag (serve/status.ts): the ranges this process holds.
      current: this.curEnd >= this.curStart ? { start: this.curStart, end: this.curEnd, cursor: this.cursor } : undefined,
      preloaded: this.spare && !this.closing ? { start: this.spare.start, end: this.spare.end } : undefined,
      leaseInFlight: this.leasing,
      lastLeaseAt: this.lastLeaseAt,
      lastLeaseMs: this.lastLeaseMs,
      ratePerSecond: this.rule.ratePerMs === undefined ? undefined : this.rule.ratePerMs * 1000,
      givenBack: this.givenBack,
      lastError: this.lastError,
      closed: this.closed,
    });
  }

  close(): Promise<void> {
    this.closePromise ??= this.doClose();
    return this.closePromise;
  }

  private served(): number {
    return this.servedBefore + Number(this.cursor - this.curStart);
  }

  onEvent(listener: (event: SegmentEvent) => void): () => void {
    return this.events.add(listener);
  }

  private emit(event: SegmentEvent): void {
    this.events.emit(event);
  }

  private closedError(): IdleaseError {
    return new IdleaseError('CLOSED', `The segment allocator for tag ${JSON.stringify(this.tag)} was closed; create a new one.`);
  }

  private slowNext(): Promise<bigint> {
    if (this.closing) return Promise.reject(this.closedError());
    if (this.waiters.isEmpty() && this.switchToSpare()) return this.next();
    if (this.exhausted) return Promise.reject(this.exhausted);
    return this.enqueue<bigint>(1, null);
  }

  private slowBatch(n: number): Promise<bigint[]> {
    if (this.closing) return Promise.reject(this.closedError());
    const out: bigint[] = [];
    if (this.waiters.isEmpty()) {
      for (;;) {
        while (out.length < n && this.cursor <= this.limit) out.push(this.cursor++);
        if (out.length === n || !this.switchToSpare()) break;
      }
      if (this.cursor - 1n >= this.preloadAt) this.preloadSoon();
      if (out.length === n) return Promise.resolve(out);
    }
    if (this.exhausted) {
      // Nothing more will come: the IDs taken are the tag's last, handed out (fewer than asked);
      // the next call meets EXHAUSTED. Rejecting would burn them when the caller ends.
      return out.length > 0 ? Promise.resolve(out) : Promise.reject(this.exhausted);
    }
    return this.enqueue<bigint[]>(n, out);
  }

  private enqueue<T>(need: number, batch: bigint[] | null): Promise<T> {
    this.waits++;
    this.emit({ type: 'wait', tag: this.tag });
    const p = this.waiters.add<T>(need, batch, this.options.waitTimeoutMs, (held, isHead) => this.timedOut(held, isHead));
    this.ensureLease();
    this.checkState('enqueue');
    return p;
  }

  private timedOut(held: bigint[] | null, isHead: boolean): IdleaseError {
    this.timeouts++;
    if (isHead && held) this.reclaim(held);
    this.cursor = this.waiters.serve(this.cursor, this.limit);
    const cause = this.lastError;
    const waited = (within: string) => `No segment for tag ${JSON.stringify(this.tag)} within ${within}: memory is used up and `;
    const lib = waited(`${this.options.waitTimeoutMs} ms (waitTimeoutMs)`);
    // For the CLI: one run, no allocator that lives on; what it can do is rerun, or wait longer.
    const cli = (why: string) => ({
      message: `${waited(`${this.options.waitTimeoutMs / 1000} s`)}${why} Then rerun (--wait <seconds> waits longer).`,
    });
    let err: IdleaseError;
    if (!this.leasing) {
      err = new IdleaseError(
        'INVARIANT',
        `${lib}no lease was in flight — an allocator bug, please report it; the allocator starts a lease now.`,
      );
      this.ensureLease();
    } else if (cause !== undefined) {
      const problem = connectionProblem(cause);
      const last = `the lease keeps failing; last database error: ${(cause as Error)?.message ?? String(cause)}.`;
      const check =
        problem === undefined || problem === 'unreachable'
          ? 'Check that the database is reachable.'
          : `That is ${describeConnectionProblem(problem)}.`;
      err = new IdleaseError(
        'DB_UNAVAILABLE',
        `${lib}${last} ` +
          (problem === undefined || problem === 'unreachable'
            ? 'Check that the database is reachable; the allocator keeps retrying and recovers by itself.'
            : `That is ${describeConnectionProblem(problem)}. The allocator keeps retrying (credentials may be rotated) and recovers once it is fixed.`),
        { cause, cli: cli(`${last} ${check}`) },
      );
    } else {
      const sent = `the lease sent ${Math.round(this.options.clock.monoMs() - this.leaseStartedAt)} ms ago has not answered (no database error seen yet).`;
      err = new IdleaseError(
        'DB_UNAVAILABLE',
        `${lib}${sent} Check that the database is reachable and not blocked on a lock; the allocator keeps waiting and recovers by itself.`,
        { cli: cli(`${sent} Check that the database is reachable and not blocked on a lock.`) },
      );
    }
    this.emit({ type: 'timeout', tag: this.tag, error: err });
    return err;
  }

  /**
   * A batch that will not be delivered (timed out, allocator closing or exhausted) gives
   * back the IDs it took from the current segment, if nothing was taken after them: they
   * were never handed out, so serving them again keeps every guarantee. IDs it took from
   * an earlier segment are abandoned.
   */
  private reclaim(batch: bigint[]): void {
    const last = batch.at(-1);
    if (last === undefined || last !== this.cursor - 1n) return;
    let i = batch.length - 1;
    while (i > 0 && batch[i - 1]! >= this.curStart) i--;
    if (batch[i]! >= this.curStart) this.cursor = batch[i]!;
    batch.length = 0;
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
    this.cursor = this.waiters.serve(s.start, s.end);
    this.curEnd = s.end;
    this.limit = s.end;
    this.preloadAt = NEVER;
    this.preloadWanted = false;
    if (this.cursor <= this.limit) {
      const size = s.end - s.start + 1n;
      const threshold = this.rule.preloadThreshold(size, this.options.preloadMs);
      const at = this.curEnd - threshold;
      if (this.cursor - 1n >= at) this.preloadWanted = true;
      else this.preloadAt = at;
    }
    this.ensureLease();
  }

  /** The current segment is running low: lease the next one in the background. */
  private preloadSoon(): void {
    this.preloadAt = NEVER;
    if (this.spare !== null) return;
    this.preloadWanted = true;
    this.ensureLease();
  }

  /** The one rule for whether the lease loop should run. */
  private leaseNeeded(): boolean {
    return !this.closing && this.exhausted === undefined && this.spare === null && (this.preloadWanted || !this.waiters.isEmpty());
  }

  private ensureLease(): void {
    if (!this.leasing && this.leaseNeeded()) this.leaseTask.start();
  }

  private async leaseStep(): Promise<number> {
    this.leaseStartedAt = this.options.clock.monoMs();
    const lease = await this.leaseOnce();
    this.lastError = undefined;
    this.accept(lease, Math.round(lease.ms));
    return 0;
  }

  /** Fatal errors end the loop and fail every waiter; the others are retried after `retryInMs`. */
  private leaseFailed(err: unknown, attempt: number, retryInMs: number): boolean {
    this.lastError = err;
    if (isFatal(err)) {
      if (isIdleaseError(err, 'EXHAUSTED')) this.exhausted = err;
      // A batch holding the tag's last IDs gets them: fewer than asked, and EXHAUSTED from the next call.
      this.waiters.failAll(err, this.exhausted === err);
      return false;
    }
    this.leaseErrors++;
    this.emit(leaseErrorEvent(this.tag, err, attempt, retryInMs));
    return true;
  }

  /** One lease through the lease rule (lease.ts): the row, the step, full, regression, the failover jump. */
  private async leaseOnce(): Promise<Lease> {
    const lease = await this.rule.lease({ demand: this.waiters.demand(), served: this.served() });
    this.currentStep = lease.size;
    return lease;
  }

  private accept(seg: Segment, ms: number): void {
    this.leases++;
    this.lastLeaseAt = this.options.clock.wallMs();
    this.lastLeaseMs = ms;
    this.emit({ type: 'lease', tag: this.tag, start: seg.start, end: seg.end, step: this.currentStep, ms });
    if (this.spare !== null) throw new IdleaseError('INVARIANT', 'segment allocator leased while a spare segment was buffered');
    this.preloadWanted = false;
    if (this.closing) {
      // Not served any more; kept only so close() can give it back.
      this.spare = seg;
      return;
    }
    if (this.cursor > this.limit) this.install(seg);
    else this.spare = seg;
    this.checkState('lease accepted');
  }

  /**
   * The state machine's invariants, checked where they could break. Off outside tests: the
   * structure above keeps them, and the hot path never pays for the check.
   */
  private checkState(where: string): void {
    if (!ASSERT_STATE) return;
    const waiting = !this.waiters.isEmpty();
    let broken: string | undefined;
    if (waiting && this.cursor <= this.limit) broken = 'callers wait while memory holds IDs';
    else if (waiting && !this.leasing && !this.closing && this.exhausted === undefined) broken = 'callers wait with no lease in flight';
    else if (waiting && this.spare !== null) broken = 'callers wait while a spare segment is buffered';
    else if (this.spare !== null && this.spare.start <= this.curEnd) broken = 'the spare segment is not above the current one';
    else if (this.rule.latestEnd < this.curEnd) broken = 'the current segment ends above the latest lease';
    if (broken === undefined) return;
    const err = new IdleaseError('INVARIANT', `segment allocator for tag ${JSON.stringify(this.tag)}: ${broken} (after ${where}).`);
    this.waiters.failAll(err);
    throw err;
  }

  private async doClose(): Promise<void> {
    this.closing = true;
    const held = this.waiters.headBatch();
    if (held) this.reclaim(held);
    // Stop serving first: nothing handed out after this point can be given back by mistake.
    this.limit = this.cursor - 1n;
    this.preloadAt = NEVER;
    this.waiters.failAll(this.closedError());
    await this.leaseTask.stop(this.options.closeTimeoutMs);
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
    if (this.leasing) return; // a lease still in flight: its end is unknown, so give nothing back
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

/** Ascending IDs as the fewest inclusive ranges. */
function toRanges(ids: readonly bigint[]): IdRange[] {
  const out: IdRange[] = [];
  let start = ids[0]!;
  let end = start;
  for (let i = 1; i < ids.length; i++) {
    const id = ids[i]!;
    if (id !== end + 1n) {
      out.push({ start, end });
      start = id;
    }
    end = id;
  }
  out.push({ start, end });
  return out;
}
