import { randomBytes } from 'node:crypto';
import { IdleaseError, isRetryable } from '../errors.js';
import { Emitter } from '../runtime/events.js';
import { BackgroundTask } from '../runtime/task.js';
import { settlesWithin, Timeout, within } from '../runtime/deadline.js';
import { wakeableSleep, type WakeableSleep } from '../runtime/clock.js';
import { backoffMs } from '../runtime/backoff.js';
import { leaseErrorEvent, SegmentLeaser } from '../segment/lease.js';
import { resolveRedisSequenceOptions, type RedisSequenceOptions, type ResolvedRedisSequenceOptions } from './options.js';
import { ForeignKey, RedisKey } from './redis-store.js';
import type { RedisSequence, RedisSequenceEvent, RedisSequenceStats } from './types.js';
import { isRegression, windowOf, type Window } from './window.js';

/** Longest pause between two calls of a caller waiting for another process's window. */
const MAX_POLL_MS = 50;

/**
 * A sequence issued by Redis inside windows leased from the database. Each call is one script on
 * the tag's key (script.ts): it issues, or says the key is another incarnation's, or elects this
 * caller to lease the next window. The window loop (one BackgroundTask) leases with the segment
 * store — one forward-reserved statement, committed before Redis ever sees the window — and
 * installs by compare-and-set on the incarnation that elected it.
 */
class RedisSequenceImpl implements RedisSequence {
  readonly tag: string;
  private readonly options: ResolvedRedisSequenceOptions;
  /** The tag's key, bound to its owner once the owner is read (the first call). */
  private key: RedisKey | undefined;
  private binding: Promise<RedisKey> | undefined;
  /** This process's election token (script.ts: a lost reply that elected it is won back). */
  private readonly token = randomBytes(8).toString('hex');
  private readonly events: Emitter<RedisSequenceEvent>;
  private readonly windowTask: BackgroundTask;

  /** The incarnation that elected this process to lease a window; cleared by a definite install answer. */
  private electedBy: string | undefined;
  /** Counts elections, so a round clears only the election it served, not one won meanwhile. */
  private elections = 0;
  private demand = 0;
  /** IDs the key still held, unissued, when it elected this process (0 after a reseed). */
  private leftAtElection = 0;
  /** The window this process queued, given back on close if nobody started it. */
  private queued: { window: Window; identity: string } | undefined;
  /** Woken when the window loop finishes a round, so waiting callers ask Redis again at once. */
  private readonly sleepers = new Set<WakeableSleep>();
  private fatal: unknown;
  /** EXHAUSTED from the row: raised to callers once the key has nothing left. */
  private exhausted: unknown;
  private closing = false;
  private closed = false;
  private closePromise: Promise<void> | undefined;

  /** The lease rule (segment/lease.ts), shared with the segment allocator; it keeps the rate and latency averages. */
  private readonly rule: SegmentLeaser;
  private windowSize = 0;
  private rateAt: number | undefined;
  private ratePos = 0;
  /** What went wrong last in the window loop, and on which side: a caller that gives up names it. */
  private windowFailure: { side: 'redis' | 'db'; error: unknown } | undefined;
  /** The last script call failed (cleared by the next answer): a caller that gives up now blames Redis. */
  private redisFailure: unknown;

  private served = 0;
  private calls = 0;
  private windows = 0;
  private reseeds = 0;
  private lostWindows = 0;
  private givenBack = 0n;
  private regressions = 0;
  private redisErrors = 0;
  private leaseErrors = 0;
  private timeouts = 0;
  private left = 0;
  private readonly queue: Array<{ resolve: (id: bigint) => void; reject: (err: unknown) => void; deadline: number }> = [];
  private draining = false;
  private preloadLeft = 500;
  private lastError: unknown;

  constructor(options: ResolvedRedisSequenceOptions) {
    this.options = options;
    this.tag = options.tag;
    this.events = new Emitter(options.onEvent);
    this.rule = new SegmentLeaser(options, {
      creator: 'createRedisSequence',
      // The key's high-water mark refuses a window below any process's (windowStep, 'low').
      regressions: 'caller',
    });
    this.windowTask = new BackgroundTask({
      wanted: () => this.electedBy !== undefined && !this.closing && this.fatal === undefined,
      step: () => this.windowStep(),
      failed: (err, attempt, retryInMs) => this.windowFailed(err, attempt, retryInMs),
      ended: () => this.wakeCallers(),
      backoff: { minMs: options.retryMinMs, maxMs: options.retryMaxMs },
      clock: options.clock,
    });
  }

  /**
   * Callers that arrive while a call is on the wire share the next one: one script call issues for
   * all of them, in call order. A caller still gets an ID above every ID handed out before it
   * called, since its call is sent after it arrived. Each caller's wait is counted from its own
   * arrival: a batch of callers gives up at its oldest caller's deadline, so none waits longer
   * than waitTimeoutMs, whatever was ahead of it.
   */
  next(): Promise<bigint> {
    const deadline = this.options.clock.monoMs() + this.options.waitTimeoutMs;
    return new Promise<bigint>((resolve, reject) => {
      this.queue.push({ resolve, reject, deadline });
      if (!this.draining) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.draining = true;
    while (this.queue.length > 0) {
      const callers = this.queue.splice(0, this.options.maxBatch);
      try {
        const ids = await this.take(callers.length, callers[0]!.deadline);
        for (let i = 0; i < callers.length; i++) callers[i]!.resolve(ids[i]!);
      } catch (err) {
        // A bound that ran out is the oldest caller's: the younger ones go back to the head of
        // the queue with the rest of their own wait.
        const now = this.options.clock.monoMs();
        const timedOut = err instanceof IdleaseError && (err.code === 'REDIS_UNAVAILABLE' || err.code === 'DB_UNAVAILABLE');
        const waiting = timedOut ? callers.filter((c) => c.deadline > now) : [];
        for (const c of callers) if (!waiting.includes(c)) c.reject(err);
        this.queue.unshift(...waiting);
      }
    }
    this.draining = false;
  }

  nextBatch(n: number): Promise<bigint[]> {
    if (!Number.isSafeInteger(n) || n < 1 || n > this.options.maxBatch) {
      return Promise.reject(
        new IdleaseError(
          'BAD_ARGUMENT',
          `nextBatch(n): n must be an integer from 1 to ${this.options.maxBatch} (maxBatch), got ${String(n)}.`,
        ),
      );
    }
    return this.take(n, this.options.clock.monoMs() + this.options.waitTimeoutMs);
  }

  stats(): RedisSequenceStats {
    return Object.freeze({
      kind: 'redis',
      tag: this.tag,
      key: this.options.key,
      served: this.served,
      calls: this.calls,
      windows: this.windows,
      reseeds: this.reseeds,
      lostWindows: this.lostWindows,
      givenBack: this.givenBack,
      regressions: this.regressions,
      redisErrors: this.redisErrors,
      leaseErrors: this.leaseErrors,
      timeouts: this.timeouts,
      windowSize: this.windowSize,
      left: this.left,
      ratePerSecond: this.rule.ratePerMs === undefined ? undefined : this.rule.ratePerMs * 1000,
      lastError: this.lastError,
      closed: this.closed,
    });
  }

  onEvent(listener: (event: RedisSequenceEvent) => void): () => void {
    return this.events.add(listener);
  }

  close(): Promise<void> {
    this.closePromise ??= this.doClose();
    return this.closePromise;
  }

  /**
   * The key bound to its owner: read once (the install id from the database), retried until the
   * caller's deadline; DB_UNAVAILABLE then. NOT_MIGRATED and other typed refusals pass at once.
   */
  private async bind(deadline: number): Promise<RedisKey> {
    const { redis, key, commandTimeoutMs, clock } = this.options;
    for (let attempt = 0; ; attempt++) {
      this.binding ??= this.options
        .owner()
        .then((owner) => (this.key = new RedisKey(redis, key, commandTimeoutMs, clock, owner, this.token)));
      const b = this.binding;
      try {
        return await within(b, Math.max(1, deadline - clock.monoMs()), `reading the install id for tag ${JSON.stringify(this.tag)}`, clock);
      } catch (err) {
        if (this.binding === b) this.binding = undefined;
        if (err instanceof IdleaseError) throw err;
        const waitMs = backoffMs(attempt, this.options.retryMinMs, this.options.retryMaxMs);
        if (clock.monoMs() + waitMs >= deadline) {
          throw this.timedOut(
            new IdleaseError(
              'DB_UNAVAILABLE',
              `Could not read the install id of the database holding tag ${JSON.stringify(this.tag)} within ${this.options.waitTimeoutMs} ms (waitTimeoutMs): ` +
                `${String((err as Error)?.message ?? err)}. Check the database: the Redis key is bound to it.`,
              { cause: err },
            ),
          );
        }
        await clock.sleep(waitMs);
      }
    }
  }

  private async take(n: number, deadline: number): Promise<bigint[]> {
    const clock = this.options.clock;
    const key = this.key ?? (await this.bind(deadline));
    const out: bigint[] = [];
    let failures = 0;
    let pauseMs = 1;
    let failedAtRedis: unknown;
    for (;;) {
      if (this.closing) throw this.closedError();
      if (this.fatal !== undefined) throw this.fatal;
      let waitMs: number;
      const left = deadline - clock.monoMs();
      // A wait that Redis spent (in part) is Redis's fault, even when it answered again at the end
      // (after a failover, the new primary's first window may still be on its way).
      const redisCause = this.redisFailure ?? failedAtRedis;
      if (left <= 0) throw this.timedOut(redisCause !== undefined ? this.redisUnavailable(redisCause) : this.noWindow());
      try {
        const reply = await key.next(
          n - out.length,
          this.preloadLeft,
          this.options.claimTimeoutMs,
          Math.min(this.options.commandTimeoutMs, Math.ceil(left)),
        );
        this.calls++;
        failures = 0;
        this.redisFailure = undefined;
        if (reply.kind === 'stale') {
          this.reseeds++;
          this.emit({ type: 'reseed', tag: this.tag, identity: reply.identity });
          this.elect(reply.identity, n - out.length, 0);
        } else if (reply.kind === 'foreign') {
          throw new ForeignKey(reply.owner);
        } else {
          for (const id of reply.ids) out.push(id);
          this.left = reply.left;
          this.measure(reply.count);
          if (reply.elected !== undefined) this.elect(reply.elected, n - out.length, reply.left);
          if (out.length === n) {
            this.served += n;
            return out;
          }
          if (reply.left === 0 && this.exhausted !== undefined) throw this.exhausted;
        }
        waitMs = pauseMs;
        pauseMs = Math.min(2 * pauseMs, MAX_POLL_MS);
      } catch (err) {
        if (err instanceof ForeignKey) throw this.foreign(err.owner, key);
        if (err === this.exhausted) throw err;
        if (err instanceof IdleaseError && (err.code === 'INVARIANT' || err.code === 'BAD_CONFIG')) {
          this.fatal = err;
          throw err;
        }
        // A call cut short by this caller's own deadline (its bound was what was left of the wait)
        // says nothing about Redis: the wait ends as it would have, blamed on what it waited for.
        if (err instanceof Timeout && left < this.options.commandTimeoutMs) continue;
        this.redisErrors++;
        this.lastError = err;
        this.redisFailure = err;
        failedAtRedis = err;
        this.emit({ type: 'redis-error', tag: this.tag, error: err });
        // IDs already taken for this call are dropped with it: a gap, as for any call that fails.
        waitMs = backoffMs(failures++, this.options.retryMinMs, this.options.retryMaxMs);
      }
      await this.pause(Math.max(0, Math.min(waitMs, deadline - clock.monoMs())));
    }
  }

  /** A key bound to another database row: fatal for this sequence, and what to change. */
  private foreign(owner: string, key: RedisKey): IdleaseError {
    const err = new IdleaseError(
      'BAD_CONFIG',
      `Redis key ${key.key} belongs to another database row (${owner}); this sequence issues from ${this.ownerName()}. ` +
        'Two databases, tables or installs share this Redis and key prefix: give each its own keyPrefix (CLI: --key-prefix). Nothing was issued from that key.',
    );
    this.fatal = err;
    return err;
  }

  private ownerName(): string {
    return `tag ${JSON.stringify(this.tag)} of ${this.options.schema ? `${this.options.schema}.` : ''}${this.options.table}`;
  }

  /** Wait `ms`, or less if the window loop finishes a round first. */
  private async pause(ms: number): Promise<void> {
    const s = wakeableSleep(this.options.clock, ms);
    this.sleepers.add(s);
    try {
      await s.done;
    } finally {
      this.sleepers.delete(s);
    }
  }

  private wakeCallers(): void {
    for (const s of this.sleepers) s.wake();
  }

  private elect(identity: string, demand: number, left: number): void {
    if (this.closing || this.fatal !== undefined || this.exhausted !== undefined) {
      // Elected by a call that was on the wire when this process stopped leasing: hand it on.
      void this.key?.release(identity).catch(() => undefined);
      return;
    }
    // Already elected on this incarnation (the script re-elects its claim holder's token on every
    // call, so that a reply lost to a timeout does not leave the election to nobody): one round.
    if (this.electedBy === identity) return;
    this.electedBy = identity;
    this.elections++;
    this.demand = Math.max(this.demand, demand);
    this.leftAtElection = left;
    if (this.windowTask.running) this.windowTask.wake();
    else this.windowTask.start();
  }

  /**
   * IDs the key may hold when the next window is leased: the step policy's preload rule, on the
   * key's rate across all processes. Kept up to date when its inputs change, not computed per call.
   */
  private refreshPreload(): void {
    const size = BigInt(this.windowSize || this.rule.rowStep || 1000);
    this.preloadLeft = Number(this.rule.preloadThreshold(size, this.options.preloadMs));
  }

  /**
   * The key's issue rate, from the count of IDs it issued (every process's calls move it, gaps in
   * the ID space do not): measured at any speed. A count that went down is a reset key: skipped.
   */
  private measure(count: number): void {
    const now = this.options.clock.monoMs();
    if (this.rateAt === undefined) {
      this.rateAt = now;
      this.ratePos = count;
      return;
    }
    const dt = now - this.rateAt;
    const moved = count - this.ratePos;
    // 100 ms makes a steady sample; a few ms are enough when they saw several windows go (flat out,
    // the first windows would otherwise be leased at the row's step every millisecond or two).
    if (dt < 100 && (dt < 5 || moved < 2 * Math.max(this.windowSize, this.rule.rowStep ?? 1000))) return;
    if (moved >= 0) {
      this.rule.addRate(moved / dt);
      this.refreshPreload();
    }
    this.rateAt = now;
    this.ratePos = count;
  }

  private async windowStep(): Promise<number> {
    const identity = this.electedBy!;
    const election = this.elections;
    const started = this.options.clock.monoMs();
    const key = this.key!;
    let w: Window;
    try {
      w = await this.leaseWindow();
    } catch (err) {
      this.windowFailure = { side: 'db', error: err };
      throw err;
    }
    this.refreshPreload();
    let r: Awaited<ReturnType<RedisKey['install']>>;
    try {
      r = await key.install(identity, w);
    } catch (err) {
      // The window may have landed (a lost reply): never given back, a gap at most.
      if (err instanceof ForeignKey) throw this.foreign(err.owner, key);
      this.windowFailure = { side: 'redis', error: err };
      throw err;
    }
    this.windowFailure = undefined;
    if (this.elections === election) this.electedBy = undefined;
    this.demand = 0;
    switch (r.kind) {
      case 'current':
      case 'queued':
        this.windows++;
        if (r.kind === 'queued') this.queued = { window: w, identity };
        this.emit({ type: 'window', tag: this.tag, start: w.base + 1n, end: w.end, as: r.kind, ms: this.options.clock.monoMs() - started });
        break;
      case 'lost':
        // The script saw this window above everything the key was given and another one queued:
        // it was never installed, so the row may take it back.
        await this.lose(w, 'race', true);
        break;
      case 'low': {
        // Below the key's high-water mark: a later window won, or a resent install of this very
        // window already landed (ioredis resends), or the database went back. Never given back.
        const row = await this.options.store.read(this.tag);
        const maxId = row?.maxId ?? 0n;
        if (isRegression(w, r.hi, maxId)) throw this.regressed(w, r.hi, r.top, maxId);
        await this.lose(w, 'race', false);
        break;
      }
      case 'stale':
        // The incarnation that elected us is gone. This install may have landed on it before it
        // went (a resent call), so the window is a gap; the next call re-elects on the new one.
        await this.lose(w, 'incarnation', false);
        break;
    }
    this.wakeCallers();
    return 0;
  }

  private windowFailed(err: unknown, attempt: number, retryInMs: number): boolean {
    this.lastError = err;
    if (err instanceof IdleaseError && err.code === 'EXHAUSTED') {
      // The row is at 2^63−1, but the key may still hold its last IDs: callers take them, and
      // meet EXHAUSTED only when the key is empty.
      this.exhausted = err;
      const identity = this.electedBy;
      this.electedBy = undefined;
      if (identity !== undefined) void this.key?.release(identity).catch(() => undefined);
      return false;
    }
    if (!isRetryable(err)) {
      this.fatal = err;
      // The others must not wait out claimTimeoutMs for a window this process will never install:
      // elected in turn, each meets the same error itself.
      if (this.electedBy !== undefined) void this.key?.release(this.electedBy).catch(() => undefined);
      return false;
    }
    this.leaseErrors++;
    this.emit(leaseErrorEvent(this.tag, err, attempt, retryInMs));
    return true;
  }

  /**
   * The window through the lease rule (segment/lease.ts), as the segment allocator leases: what the
   * key still held when it elected this process is leased less, so a Redis that loses its data,
   * queued window included, or dies while this lease is on its way, costs at most one window of IDs.
   */
  private async leaseWindow(): Promise<Window> {
    const lease = await this.rule.lease({ demand: this.demand, held: this.leftAtElection });
    this.windowSize = lease.chosen;
    return windowOf(lease.end, lease.size, this.tag);
  }

  private async lose(w: Window, reason: 'race' | 'incarnation', mayGiveBack: boolean): Promise<void> {
    this.lostWindows++;
    const ok = mayGiveBack ? await this.giveBack(w) : false;
    this.emit({ type: 'lost-window', tag: this.tag, start: w.base + 1n, end: w.end, reason, givenBack: ok });
  }

  /** The row's CAS give-back: only if nobody leased after `w`, otherwise `w` stays a gap. */
  private async giveBack(w: Window): Promise<boolean> {
    const ok = await this.options.store.giveBack(this.tag, w.end, w.base).catch(() => false);
    if (ok) this.givenBack += BigInt(w.size);
    this.emit({ type: 'give-back', tag: this.tag, from: w.end, to: w.base, ok });
    return ok;
  }

  private regressed(w: Window, hi: bigint, top: bigint, maxId: bigint): IdleaseError {
    this.regressions++;
    this.emit({ type: 'regression', tag: this.tag, start: w.base + 1n, end: w.end, redisHigh: hi, maxId });
    const above = top > 0n ? top : hi;
    return new IdleaseError(
      'INVARIANT',
      `Tag ${JSON.stringify(this.tag)} went backwards in the database: a lease returned (${w.base}, ${w.end}], but Redis key ${this.options.key} ` +
        `already issued IDs up to ${top > 0n ? top : `at most ${hi}`} (windows up to ${hi}; max_id now ${maxId}). Was the database failed over to a replica that missed recent writes, or restored? ` +
        `Nothing was issued from that window. Raise the row above what Redis and every other process used: \`idlease tag bump ${this.tag} --to <n>\` with n > ${hi >= above ? hi : above} ` +
        'plus the largest step in use × the number of processes (docs/redis.md), then restart this process.',
    );
  }

  private redisUnavailable(err: unknown): IdleaseError {
    return new IdleaseError(
      'REDIS_UNAVAILABLE',
      `Redis did not answer for tag ${JSON.stringify(this.tag)} (key ${this.options.key}) within ${this.options.waitTimeoutMs} ms (waitTimeoutMs): ${String((err as Error)?.message ?? err)}. ` +
        'Check that the Redis server is up and that the client is connected; calls recover by themselves when it answers.',
      { cause: err },
    );
  }

  /** No window arrived in time: REDIS_UNAVAILABLE when this process's install failed at Redis, else DB_UNAVAILABLE. */
  private noWindow(): IdleaseError {
    const f = this.windowFailure;
    if (f?.side === 'redis') return this.redisUnavailable(f.error);
    const cause = f?.error;
    return new IdleaseError(
      'DB_UNAVAILABLE',
      `No window for tag ${JSON.stringify(this.tag)} arrived in Redis within ${this.options.waitTimeoutMs} ms (waitTimeoutMs): ` +
        (cause === undefined
          ? 'the process elected to lease it did not install one (it may be another process, holding the election for claimTimeoutMs).'
          : `last error: ${String((cause as Error)?.message ?? cause)}.`) +
        ' Check the database holding the segment row.',
      cause === undefined ? undefined : { cause },
    );
  }

  private timedOut(err: IdleaseError): IdleaseError {
    this.timeouts++;
    this.emit({ type: 'timeout', tag: this.tag, error: err });
    return err;
  }

  private closedError(): IdleaseError {
    return new IdleaseError('CLOSED', `The Redis sequence for tag ${JSON.stringify(this.tag)} was closed; create a new one.`);
  }

  private emit(event: RedisSequenceEvent): void {
    this.events.emit(event);
  }

  private async doClose(): Promise<void> {
    this.closing = true;
    this.wakeCallers();
    const { closeTimeoutMs, clock } = this.options;
    const until = clock.monoMs() + closeTimeoutMs;
    await this.windowTask.stop(closeTimeoutMs);
    const key = this.key;
    if (this.electedBy !== undefined) void key?.release(this.electedBy).catch(() => undefined);
    const q = this.queued;
    if (q !== undefined && key !== undefined) {
      const giveBack = (async () => {
        if (await key!.unqueue(q.identity, q.window.base)) await this.giveBack(q.window);
      })().catch(() => undefined);
      await settlesWithin(giveBack, Math.max(0, until - clock.monoMs()), clock);
    }
    this.closed = true;
  }
}

/**
 * A Redis sequence for `tag`: one total order of IDs across every process, issued by Redis inside
 * windows leased from the tag's segment row (docs/redis.md).
 */
export function createRedisSequence(options: RedisSequenceOptions): RedisSequence {
  return new RedisSequenceImpl(resolveRedisSequenceOptions(options));
}
