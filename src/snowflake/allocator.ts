import { IdleaseError, isIdleaseError, isRetryable, type IdleaseErrorCode } from '../errors.js';
import { layoutLimits, type IdLayout } from '../layout/index.js';
import { settlesWithin, withDeadline } from '../runtime/deadline.js';
import { Emitter } from '../runtime/events.js';
import { BACK_OFF, BackgroundTask } from '../runtime/task.js';
import { resolveSnowflakeOptions, type ResolvedSnowflakeOptions, type SnowflakeAllocatorOptions } from './options.js';
import type { SnowflakeAllocator, SnowflakeEvent, SnowflakeStats } from './types.js';
import { newHolder, type WorkerIdStore } from './worker-store.js';

interface Lease {
  readonly workerId: number;
  readonly token: string;
  /** Monotonic ms after which we may not issue: counted from before the renewal was sent, minus a margin. */
  fenceUntil: number;
  /** Highest Unix ms recorded in the row for this id: our time field never passes it. */
  boundMs: number;
  /** Monotonic ms before which we may not issue: a claim after a failover waits out a lease (-Infinity otherwise). */
  readonly issueFrom: number;
  /** The instance to write into the worker table's marker once issueFrom has passed; undefined when there is nothing to write. */
  markPending: string | undefined;
  /** Monotonic ms when the next renewal is due. */
  renewDueAt: number;
}

/** Why an ID could not be issued right now. */
type Wait = 'lease' | 'clock' | 'failover';

/**
 * Codes a failed claim or renewal is retried after although ERROR_CATEGORIES calls them fatal:
 * the lease loop has always retried them (a worker store raises none of them today).
 */
const LEASE_RETRIED: readonly IdleaseErrorCode[] = ['UNKNOWN_TAG', 'BAD_ARGUMENT', 'MIGRATION_FAILED', 'EXHAUSTED'];

/**
 * Snowflake IDs made in memory: [time | worker | sequence] per the layout, with the worker id
 * leased from the database. The hot path is arithmetic on fields plus two clock reads; the
 * database is touched only by one background loop (claim, then renew every ttl/3).
 *
 * Fencing: the row's expiry is the database's now + ttl at the time the renewal ran, which is
 * no earlier than when we sent it; so counting ttl (less a margin) on our own monotonic clock
 * from *before* sending ends our use of the id before anyone else can claim it, whatever our
 * wall clock does and however long we were paused (a paused process wakes up past fenceUntil).
 *
 * The row's max_time_ms is raised (by the renewal, before the new bound is used) to the
 * highest time this holder may put into an ID, and a claimer starts above the value it finds:
 * a new holder never reuses a time of an old one, whatever the two hosts' clocks say.
 */
class SnowflakeAllocatorImpl implements SnowflakeAllocator {
  readonly group: string;
  readonly layout: IdLayout;
  private readonly options: ResolvedSnowflakeOptions;
  private readonly store: WorkerIdStore;
  private readonly maxWorkerId: number;
  private readonly maxSequence: number;
  /** As a number: times in units stay far below 2^53 (they come from Date.now()), and a larger limit is never reached. */
  private readonly maxTime: number;
  private readonly timeShift: bigint;
  private readonly workerShift: bigint;
  private readonly sequenceShift: bigint;

  private lease: Lease | undefined;
  /** Last issued time field, in units since the epoch (a number: the hot path avoids bigint until the end). */
  private lastTime = -1;
  /** The last ID issued, its time and lease: the next ID in the same unit is one bigint add away. */
  private lastId = 0n;
  private lastIdTime = -1;
  private lastIdLease: Lease | undefined;
  /** 1 << sequenceShift: what the next sequence number adds to an ID. */
  private readonly sequenceUnit: bigint;
  private sequence = 0;

  private readonly events: Emitter<SnowflakeEvent>;
  /** Claims a worker id, then renews it every renewEveryMs; woken early when the fence or the bound runs out. */
  private readonly leaseTask: BackgroundTask;
  private closing = false;
  private closed = false;
  private closePromise: Promise<void> | undefined;
  /** Why the loop could not get a lease last time: what a waiter that times out is told. */
  private lastProblem: unknown;
  private fatal: IdleaseError | undefined;

  private issued = 0;
  private claims = 0;
  private renewals = 0;
  private leaseErrors = 0;
  private lost = 0;
  private clockWaits = 0;
  private timeouts = 0;
  private failoverWaits = 0;

  constructor(options: ResolvedSnowflakeOptions) {
    this.options = options;
    this.group = options.group;
    this.layout = options.layout;
    this.store = options.store;
    const limits = layoutLimits(this.layout);
    this.maxWorkerId = limits.maxShard;
    this.maxSequence = limits.maxSequence;
    this.maxTime = Number(limits.maxTimeMs);
    const s = BigInt(this.layout.sequenceBits);
    const w = BigInt(this.layout.shardBits);
    this.timeShift = s + w;
    const workerFirst = this.layout.order === 'shard-sequence';
    this.workerShift = workerFirst ? s : 0n;
    this.sequenceShift = workerFirst ? 0n : w;
    this.sequenceUnit = 1n << this.sequenceShift;
    this.events = new Emitter(options.onEvent);
    this.leaseTask = new BackgroundTask({
      step: () => this.leaseStep(),
      failed: (err) => this.leaseFailed(err),
      backoff: { minMs: 20, maxMs: Math.min(1_000, options.leaseTtlMs / 4) },
      clock: options.clock,
    });
    this.leaseTask.start();
  }

  get workerId(): number | undefined {
    return this.lease?.workerId;
  }

  next(): Promise<bigint> {
    try {
      const r = this.tryIssue();
      if (typeof r === 'bigint') return Promise.resolve(r);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.waitAndIssue();
  }

  async nextBatch(n: number): Promise<bigint[]> {
    if (!Number.isInteger(n) || n < 1 || n > 1_000_000) {
      throw new IdleaseError('BAD_ARGUMENT', `nextBatch(n): n must be an integer from 1 to 1000000, got ${String(n)}.`);
    }
    const out: bigint[] = [];
    const clock = this.options.clock;
    // One pair of clock reads per 1024 IDs, not per ID: such a stretch takes well under a
    // millisecond, far inside the fence margin (>= 10 ms); the time field still advances when a
    // unit's sequence runs out, within maxLeadMs and the lease's bound as always.
    let mono = clock.monoMs();
    let wall = clock.wallMs();
    while (out.length < n) {
      const r = this.tryIssue(mono, wall);
      if (typeof r === 'bigint') {
        out.push(r);
        if ((out.length & 1023) === 0) {
          mono = clock.monoMs();
          wall = clock.wallMs();
        }
        continue;
      }
      out.push(await this.waitAndIssue());
      mono = clock.monoMs();
      wall = clock.wallMs();
    }
    return out;
  }

  /** One ID if the lease and the clock allow it now; otherwise what to wait for. Throws CLOSED/EXHAUSTED. */
  private tryIssue(mono?: number, wall?: number): bigint | Wait {
    if (this.closing)
      throw new IdleaseError('CLOSED', `The snowflake allocator of group ${JSON.stringify(this.group)} is closed; create a new one.`);
    const lease = this.lease;
    const clock = this.options.clock;
    if (lease === undefined) return 'lease';
    const monoNow = mono ?? clock.monoMs();
    if (monoNow >= lease.fenceUntil) {
      // Renewal is due (we were paused, or the loop slept long): do not wait for its timer.
      this.leaseTask.wake();
      return 'lease';
    }
    if (monoNow < lease.issueFrom) return 'failover';
    const { epochMs, timeUnitMs } = this.layout;
    const wallMs = wall ?? clock.wallMs();
    const now = Math.floor((wallMs - epochMs) / timeUnitMs);
    let time = this.lastTime;
    let sequence = this.sequence;
    if (now > time) {
      time = now;
      sequence = 0;
    } else if (++sequence > this.maxSequence) {
      // The unit is used up (or the clock went back): borrow the next unit, never wrap.
      time += 1;
      sequence = 0;
    }
    if (time > this.maxTime) {
      throw new IdleaseError(
        'EXHAUSTED',
        `The time field of the ${this.layout.timeBits}-bit layout is full (epoch ${new Date(epochMs).toISOString()}); use a layout with more timeBits or a later epoch.`,
      );
    }
    const startMs = epochMs + time * timeUnitMs;
    if (startMs - wallMs > this.options.maxLeadMs) return 'clock';
    if (startMs + timeUnitMs - 1 > lease.boundMs) {
      this.leaseTask.wake();
      return 'lease';
    }
    this.lastTime = time;
    this.issued++;
    // BigInt arithmetic allocates, and at millions of IDs a second that is the cost: within one
    // unit and one lease, the sequence only ever goes up by one, so the ID does too, by one unit.
    let id: bigint;
    if (time === this.lastIdTime && lease === this.lastIdLease && sequence === this.sequence + 1) {
      id = this.lastId + this.sequenceUnit;
    } else {
      id = (BigInt(time) << this.timeShift) | (BigInt(lease.workerId) << this.workerShift) | (BigInt(sequence) << this.sequenceShift);
      this.lastIdTime = time;
      this.lastIdLease = lease;
    }
    this.sequence = sequence;
    this.lastId = id;
    return id;
  }

  private async waitAndIssue(): Promise<bigint> {
    const clock = this.options.clock;
    const deadline = clock.monoMs() + this.options.waitTimeoutMs;
    let waitedForClock = false;
    for (;;) {
      if (this.fatal) throw this.fatal;
      const r = this.tryIssue();
      if (typeof r === 'bigint') return r;
      if (r === 'clock' && !waitedForClock) {
        waitedForClock = true;
        this.clockWaits++;
      }
      const left = deadline - clock.monoMs();
      if (left <= 0) {
        this.timeouts++;
        throw this.timeoutError(r);
      }
      const pause =
        r === 'clock'
          ? Math.max(1, this.layout.timeUnitMs)
          : r === 'failover'
            ? Math.max(1, (this.lease?.issueFrom ?? 0) - clock.monoMs())
            : 5;
      await clock.sleep(Math.min(left, pause));
    }
  }

  private timeoutError(reason: Wait): IdleaseError {
    if (reason === 'clock') {
      return new IdleaseError(
        'CLOCK_BACKWARDS',
        `The wall clock stayed more than maxLeadMs (${this.options.maxLeadMs} ms) behind the last issued time for ${this.options.waitTimeoutMs} ms ` +
          `(clock stepped back, or a burst beyond ${this.maxSequence + 1} IDs per ${this.layout.timeUnitMs} ms). It recovers when the clock catches up; raise maxLeadMs to borrow further.`,
        {
          cli: {
            message: `The wall clock stayed behind the last issued time of this worker id for ${this.options.waitTimeoutMs / 1000} s (the clock stepped back). Rerun once the clock has caught up (--wait <seconds> waits longer).`,
          },
        },
      );
    }
    if (reason === 'failover') {
      const lease = this.lease;
      const left = lease === undefined ? 0 : Math.max(0, Math.ceil(lease.issueFrom - this.options.clock.monoMs()));
      const what =
        `Worker id ${lease?.workerId ?? '?'} of group ${JSON.stringify(this.group)} was claimed on a database instance the worker table's marker does not name ` +
        `(after a failover, a restore, or a first start after upgrading): a live holder's last renewals may be lost there, so nothing is issued until ` +
        `leaseTtlMs + maxLeadMs (${this.options.leaseTtlMs + this.options.maxLeadMs} ms) have passed since the claim; about ${left} ms left.`;
      return new IdleaseError('NO_WORKER_ID', `${what} It recovers by itself; waitTimeoutMs above that wait rides it out.`, {
        cli: { message: `${what} Rerun in a moment (--wait <seconds> waits longer).` },
      });
    }
    if (isIdleaseError(this.lastProblem, 'NO_WORKER_ID')) return this.lastProblem;
    const what =
      `No valid worker-id lease for group ${JSON.stringify(this.group)} within WAITED: the database did not confirm a claim or renewal in time` +
      `${this.lastProblem ? ` (last error: ${(this.lastProblem as Error).message})` : ''}.`;
    return new IdleaseError(
      'DB_UNAVAILABLE',
      `${what.replace('WAITED', `${this.options.waitTimeoutMs} ms`)} It recovers by itself once the database answers.`,
      {
        cause: this.lastProblem,
        cli: {
          message: `${what.replace('WAITED', `${this.options.waitTimeoutMs / 1000} s`)} Check that the database is reachable, then rerun (--wait <seconds> waits longer).`,
        },
      },
    );
  }

  private async leaseStep(): Promise<number | typeof BACK_OFF> {
    if (this.lease === undefined) return (await this.claim()) ? this.nextRoundMs() : BACK_OFF;
    const lease = this.lease;
    const clock = this.options.clock;
    if (lease.markPending !== undefined && clock.monoMs() >= lease.issueFrom) {
      await this.markInstance(lease);
      if (this.lease === lease && clock.monoMs() < lease.renewDueAt && clock.monoMs() < lease.fenceUntil) return this.nextRoundMs();
      if (this.lease !== lease) return this.options.renewEveryMs;
    }
    await this.renew();
    return this.nextRoundMs();
  }

  /** Until the next renewal, or the end of a failover wait when that comes first (the marker is written then). */
  private nextRoundMs(): number {
    const lease = this.lease;
    if (lease === undefined) return this.options.renewEveryMs;
    const now = this.options.clock.monoMs();
    const due = lease.markPending === undefined ? lease.renewDueAt : Math.min(lease.renewDueAt, lease.issueFrom);
    return Math.max(0, Math.min(this.options.renewEveryMs, due - now));
  }

  /**
   * A failover wait is over: every holder whose claims or renewals went to an older instance has
   * fenced itself, so the table's history is complete here and later claimers need not wait.
   * Best effort: if it fails, the next claimer simply waits too.
   */
  private async markInstance(lease: Lease): Promise<void> {
    const instance = lease.markPending!;
    lease.markPending = undefined;
    try {
      await this.answered(this.store.markInstance?.(instance) ?? Promise.resolve());
    } catch (err) {
      this.leaseErrors++;
      this.emit({ type: 'lease-error', error: err });
    }
    this.emit({ type: 'failover-settled', workerId: lease.workerId, instance });
  }

  private leaseFailed(err: unknown): void {
    this.leaseErrors++;
    this.lastProblem = err;
    if (!isRetryable(err, LEASE_RETRIED)) this.fatal = err as IdleaseError;
    this.emit({ type: 'lease-error', error: err });
  }

  private async claim(): Promise<boolean> {
    const holder = newHolder();
    const { group, leaseTtlMs } = this.options;
    const claim = await this.answered(this.store.claim(group, this.maxWorkerId, holder, leaseTtlMs));
    const answeredAt = this.options.clock.monoMs();
    if (claim === undefined) {
      const alive = (await this.answered(this.store.list(group))).filter((r) => r.alive).length;
      if (alive > this.maxWorkerId) {
        this.lastProblem = new IdleaseError(
          'NO_WORKER_ID',
          `All ${this.maxWorkerId + 1} worker ids of group ${JSON.stringify(group)} are held: ${alive} holders are alive. ` +
            `Run fewer processes in this group, use another group, or a layout with more shardBits (idlease workers list --group ${group}).`,
        );
      }
      return false;
    }
    this.claims++;
    // Not usable yet: the renewal below records our bound in the row before any ID uses it.
    const { epochMs, timeUnitMs } = this.layout;
    const floor = claim.maxTimeMs >= BigInt(epochMs) ? (claim.maxTimeMs - BigInt(epochMs)) / BigInt(timeUnitMs) : -1n;
    if (floor > this.lastTime) {
      this.lastTime = Number(floor);
      this.sequence = this.maxSequence;
    } else {
      // A new worker field with an old time could sort below IDs we already gave out.
      this.sequence = this.maxSequence;
    }
    // After an asynchronous failover the row can look free (or its bound low) while an old holder,
    // whose last renewals went to the lost primary, still issues until its fence: at most ttl −
    // margin after a renewal sent before the failover, so before this claim. Waiting a whole ttl
    // from the claim's answer outlasts that fence; maxLeadMs more outlasts the time fields it
    // may have borrowed ahead of its clock (docs/failover.md#snowflake-worker-ids-at-a-failover).
    const unknownHistory = claim.instance !== undefined && claim.instance !== claim.markedInstance;
    const waitMs = leaseTtlMs + this.options.maxLeadMs;
    this.lease = {
      workerId: claim.workerId,
      token: holder.token,
      fenceUntil: -Infinity,
      boundMs: -Infinity,
      issueFrom: unknownHistory ? answeredAt + waitMs : -Infinity,
      markPending: unknownHistory ? claim.instance : undefined,
      renewDueAt: -Infinity,
    };
    this.emit({ type: 'claimed', workerId: claim.workerId, previousMaxTimeMs: claim.maxTimeMs });
    if (unknownHistory) {
      this.failoverWaits++;
      this.emit({
        type: 'failover-wait',
        workerId: claim.workerId,
        waitMs,
        instance: claim.instance!,
        markedInstance: claim.markedInstance ?? null,
      });
    }
    await this.renew();
    return this.lease !== undefined;
  }

  private async renew(): Promise<void> {
    const lease = this.lease!;
    const { clock, leaseTtlMs, maxLeadMs, fenceMarginMs, group } = this.options;
    const sentAt = clock.monoMs();
    const lastMs = this.layout.epochMs + this.lastTime * this.layout.timeUnitMs;
    const bound = Math.max(clock.wallMs(), lastMs) + leaseTtlMs + maxLeadMs + this.layout.timeUnitMs;
    const ok = await this.answered(this.store.renew(group, lease.workerId, lease.token, leaseTtlMs, BigInt(bound)));
    if (this.lease !== lease) return;
    if (!ok) {
      this.lease = undefined;
      this.lost++;
      this.emit({ type: 'lost', workerId: lease.workerId });
      return;
    }
    lease.fenceUntil = sentAt + leaseTtlMs - fenceMarginMs;
    lease.renewDueAt = sentAt + this.options.renewEveryMs;
    lease.boundMs = Math.max(lease.boundMs, bound);
    this.renewals++;
    this.lastProblem = undefined;
    this.emit({ type: 'renewed', workerId: lease.workerId, latencyMs: clock.monoMs() - sentAt });
  }

  /**
   * A claim or renewal that has not answered by ttl − margin is given up, and the loop tries
   * again: its answer could only bring a fence already past. Behind a silent network cut a
   * statement otherwise waits on an open connection until TCP retransmits it after the heal,
   * which backs off to as long as the cut itself lasted (tested: test/partition/snowflake.test.ts).
   * What it did, if it ever runs, is safe to ignore: a renewal matches our token, a claim holds
   * an id nobody uses until its lease expires.
   */
  private answered<T>(call: Promise<T>): Promise<T> {
    const { leaseTtlMs, fenceMarginMs } = this.options;
    return withDeadline(call, leaseTtlMs - fenceMarginMs, 'leaseTtlMs less the fence margin: a later answer fences nothing');
  }

  stats(): SnowflakeStats {
    const lease = this.lease;
    const clock = this.options.clock;
    const lastMs = this.layout.epochMs + this.lastTime * this.layout.timeUnitMs;
    return Object.freeze({
      kind: 'snowflake',
      group: this.group,
      workerId: lease?.workerId,
      issued: this.issued,
      claims: this.claims,
      renewals: this.renewals,
      leaseErrors: this.leaseErrors,
      lost: this.lost,
      clockWaits: this.clockWaits,
      failoverWaits: this.failoverWaits,
      failoverWaitLeftMs: lease === undefined ? 0 : Math.max(0, lease.issueFrom - clock.monoMs()),
      timeouts: this.timeouts,
      fenced: lease !== undefined && clock.monoMs() < lease.fenceUntil && clock.monoMs() >= lease.issueFrom,
      leadMs: Math.max(0, lastMs - clock.wallMs()),
      leaseLeftMs: lease === undefined ? 0 : Math.max(0, lease.fenceUntil - clock.monoMs()),
    });
  }

  onEvent(listener: (event: SnowflakeEvent) => void): () => void {
    return this.events.add(listener);
  }

  private emit(event: SnowflakeEvent): void {
    this.events.emit(event);
  }

  close(): Promise<void> {
    this.closePromise ??= (async () => {
      this.closing = true;
      const { clock, closeTimeoutMs } = this.options;
      const until = clock.monoMs() + closeTimeoutMs;
      const loopEnded = await this.leaseTask.stop(closeTimeoutMs);
      const lease = this.lease;
      this.lease = undefined;
      // Best effort: an unreleased id simply expires after leaseTtlMs. A claim or renewal still
      // in flight leaves the row's state unknown: it is left to expire too.
      if (lease && loopEnded) {
        const { epochMs, timeUnitMs } = this.layout;
        const usedMaxMs = this.lastTime < 0 ? 0n : BigInt(epochMs) + (BigInt(this.lastTime) + 1n) * BigInt(timeUnitMs) - 1n;
        const release = this.store.release(this.group, lease.workerId, lease.token, usedMaxMs > 0n ? usedMaxMs : 0n).catch(() => false);
        const answered = await settlesWithin(release, Math.max(0, until - clock.monoMs()), clock);
        if (answered && (await release)) this.emit({ type: 'released', workerId: lease.workerId });
      }
      this.closed = true;
    })();
    return this.closePromise;
  }
}

/**
 * Time-ordered 64-bit IDs made in this process, with a worker id leased from `idlease_workers`
 * (run `idlease migrate --workers` first). See docs/snowflake.md for the guarantees.
 */
export function createSnowflakeAllocator(options: SnowflakeAllocatorOptions): SnowflakeAllocator {
  return new SnowflakeAllocatorImpl(resolveSnowflakeOptions(options));
}
