/**
 * THE lease rule, the one room both mechanisms that lease from a segment row go through: the
 * segment allocator's lease loop (allocator.ts) and the Redis sequence's window loop
 * (redis-sequence/sequence.ts). Leaf's `updateSegmentFromDb` has this shape: one method for the
 * first load and every preload. It reads the row (creating it when asked), chooses the step, leases
 * in one forward-reserved statement, turns a `full` answer into the last IDs or EXHAUSTED, refuses a
 * range below one this process leased before (regression), tells whether the lease took the
 * failover jump, keeps the rate and latency averages the step and the preload are sized by, and
 * words every refusal. Two copies of it had drifted: a fenced row near 2^63 was EXHAUSTED at once
 * for one mechanism and a DB_UNAVAILABLE after waitTimeoutMs for the other.
 *
 * What stays with each mechanism: where the IDs go (memory or a Redis key), retries and their
 * backoff, what a caller waiting too long is told, and the events it emits (told here by callback).
 */
import { connectionProblem, type ConnectionProblem } from '../dialects/connection-errors.js';
import { IdleaseError } from '../errors.js';
import { MAX_INT64 } from '../ids.js';
import type { Clock } from '../runtime/clock.js';
import { shellWord } from '../shell.js';
import { chooseStep, ewma, preloadHorizonMs, preloadThreshold } from './step-policy.js';
import type { SegmentStore } from './store.js';

/** Largest step one lease statement may carry (a safe integer in JS). */
const MAX_SAFE_STEP = BigInt(Number.MAX_SAFE_INTEGER);

/** What the rule needs of a mechanism's resolved options. */
export interface LeaseRuleOptions {
  readonly store: SegmentStore;
  readonly tag: string;
  readonly table: string;
  readonly schema: string | undefined;
  readonly minStep: number;
  readonly maxStep: number;
  readonly targetLeaseMs: number;
  readonly create: Readonly<{ start: bigint; step: number; description: string }> | undefined;
  readonly clock: Clock;
}

/** What the rule tells its mechanism, for the mechanism's own events and counters. */
export interface LeaseRuleHooks {
  /** Who leases: named in UNKNOWN_TAG's fix ("pass create: … to createSegmentAllocator"). */
  readonly creator: string;
  /**
   * Who refuses a lease that comes back below an earlier one. 'rule' (the segment allocator): its
   * own leases are all the process knows, so the rule compares with them, pushes the row back up
   * and raises INVARIANT. 'caller' (the Redis sequence): the key's high-water mark knows every
   * process's windows, a stronger check the sequence makes when it installs; the rule leaves it there.
   */
  readonly regressions: 'rule' | 'caller';
  /** The row was below this process's previous lease; the range was not handed out and the row was pushed to `raisedTo`. */
  readonly regression?: (r: { start: bigint; end: bigint; previousEnd: bigint; raisedTo: bigint }) => void;
  /** This lease was the first on a new database instance: the row jumped from `rowWas` past `gap`. */
  readonly jump?: (j: { rowWas: bigint; start: bigint; end: bigint; gap: bigint }) => void;
}

export interface LeaseRequest {
  /** IDs callers already wait for (the step is at least that). */
  readonly demand: number;
  /**
   * IDs the mechanism still holds unissued (a Redis key's rest when it elected this process): the
   * lease is the chosen size less those, so what is held plus the lease is at most one step.
   */
  readonly held?: number;
  /** IDs handed out so far: sampled into the rate at each lease (the segment allocator's measure). */
  readonly served?: number;
}

/** One lease: the caller owns [start, end]. */
export interface Lease {
  readonly start: bigint;
  readonly end: bigint;
  /** IDs leased: end − start + 1. */
  readonly size: number;
  /** The size the step policy chose (before `held` and the last IDs below 2^63 − 1). */
  readonly chosen: number;
  /** How long the rule took: read, create, lease. */
  readonly ms: number;
}

/** One tag's lease rule, with the averages it keeps between leases. One per allocator or sequence. */
export class SegmentLeaser {
  /** The row's admin step as last read. */
  rowStep: number | undefined;
  /** Consumption in IDs per ms (sampled by `served` or `addRate`). */
  ratePerMs: number | undefined;
  /** Average time of a lease, ms. */
  latencyMs: number | undefined;
  /** The chosen size of the last lease (0 before the first): the step policy's growth bound. */
  previousStep = 0;
  /** Size of the last lease. */
  lastSize = 0;
  /** End of the latest lease: every later lease must start above it. */
  private lastEnd = 0n;

  get latestEnd(): bigint {
    return this.lastEnd;
  }
  private rateAt: number | undefined;
  private rateCount = 0;

  constructor(
    private readonly options: LeaseRuleOptions,
    private readonly hooks: LeaseRuleHooks,
  ) {}

  /** A rate sample (IDs per ms) measured by the mechanism itself. */
  addRate(perMs: number): void {
    this.ratePerMs = ewma(this.ratePerMs, perMs);
  }

  /** IDs that may remain when the next lease should start (step-policy.ts), from this rule's averages. */
  preloadThreshold(size: bigint, preloadMs: number): bigint {
    return preloadThreshold(size, this.ratePerMs, preloadHorizonMs(preloadMs, this.latencyMs));
  }

  /** The one lease: the first load and every later one alike. Throws typed refusals; driver errors pass through. */
  async lease(req: LeaseRequest): Promise<Lease> {
    const { store, tag, clock } = this.options;
    const started = clock.monoMs();
    if (req.served !== undefined) {
      if (this.rateAt !== undefined) this.addRate((req.served - this.rateCount) / Math.max(1, started - this.rateAt));
      this.rateAt = started;
      this.rateCount = req.served;
    }
    let row = await store.read(tag);
    const c = this.options.create;
    if (row === undefined && c !== undefined) {
      await store.create(tag, c.start - 1n, c.step, c.description);
      row = await store.read(tag);
    }
    if (row === undefined) throw this.unknownTag();
    this.rowStep = row.step;
    const chosen = chooseStep({
      rowStep: row.step,
      minStep: this.options.minStep,
      maxStep: this.options.maxStep,
      ratePerMs: this.ratePerMs,
      targetLeaseMs: this.options.targetLeaseMs,
      demand: req.demand,
      previousStep: this.previousStep,
    });
    let size = Math.max(1, chosen - (req.held ?? 0));
    // Near 2^63 − 1 the last IDs are leased as a smaller step, so EXHAUSTED comes exactly at the
    // limit. 'full' for a step that fit below the limit as last read means either another lease came
    // first (max_id moved: shrink to what is left and go again) or the row was last leased on another
    // instance and its failover jump (2 × failover_gap) does not fit: EXHAUSTED at once, never a wait.
    let maxId = row.maxId;
    let res: Awaited<ReturnType<SegmentStore['lease']>>;
    for (;;) {
      const rest = MAX_INT64 - maxId;
      if (rest < 1n) throw this.exhausted(maxId, false);
      if (BigInt(size) > rest) size = Number(rest);
      res = await store.lease(tag, size);
      if (res.kind !== 'full') break;
      if (res.maxId === maxId) throw this.exhausted(maxId, true);
      maxId = res.maxId;
    }
    if (res.kind === 'unknown') throw this.unknownTag();
    const end = res.end;
    const start = end - BigInt(size) + 1n;
    if (start < 1n || end > MAX_INT64) {
      throw new IdleaseError(
        'INVARIANT',
        `Lease for tag ${JSON.stringify(tag)} returned (${start - 1n}, ${end}], outside 1…2^63−1; refusing to hand it out.`,
      );
    }
    if (this.hooks.regressions === 'rule' && start <= this.lastEnd) throw await this.regressed(start, end);
    if (tookFailoverJump(row, start)) this.hooks.jump?.({ rowWas: row.maxId, start, end, gap: row.failoverGap! });
    this.lastEnd = end;
    this.previousStep = chosen;
    this.lastSize = size;
    const ms = clock.monoMs() - started;
    this.latencyMs = ewma(this.latencyMs, ms);
    return { start, end, size, chosen, ms };
  }

  private exhausted(maxId: bigint, fenced: boolean): IdleaseError {
    return new IdleaseError(
      'EXHAUSTED',
      fenced
        ? `Tag ${JSON.stringify(this.options.tag)} has no room left below the largest 64-bit ID (max_id = ${maxId}): the row was last leased on another database instance, ` +
            'and the failover jump (2 × failover_gap) would pass 2^63−1. IDs never wrap. Use a new tag.'
        : `Tag ${JSON.stringify(this.options.tag)} reached the largest 64-bit ID (max_id = ${maxId}); IDs never wrap. Use a new tag.`,
    );
  }

  /**
   * The row fell below what this process already leased: a failover to a replica that missed the
   * latest leases (asynchronous replication), a restore, or a hand edit. The range is never served.
   * The row is pushed back above everything this process has seen — by a lease of exactly the gap,
   * so no new statement is needed and a concurrent lease is never undone — and callers hear
   * INVARIANT with the repair to run: other processes may hold lost ranges above our end, which
   * only a margin covers.
   */
  private async regressed(start: bigint, end: bigint): Promise<IdleaseError> {
    const { store, tag } = this.options;
    const previousEnd = this.lastEnd;
    let raised = end;
    for (let gap = previousEnd - raised; gap > 0n; gap = previousEnd - raised) {
      const chunk = gap > MAX_SAFE_STEP ? MAX_SAFE_STEP : gap;
      const r = await store.lease(tag, Number(chunk)).catch(() => undefined);
      if (r?.kind !== 'leased') break; // best effort: the error below still tells the operator
      raised = r.end;
    }
    this.hooks.regression?.({ start, end, previousEnd, raisedTo: raised });
    return new IdleaseError(
      'INVARIANT',
      `Tag ${JSON.stringify(tag)} went backwards: a lease returned (${start - 1n}, ${end}], but this process already leased up to ${previousEnd} ` +
        `(${previousEnd - start + 1n} IDs behind). Was the database failed over to a replica that missed recent writes, or restored? The range was not handed out, ` +
        `and max_id was pushed to ${raised}. Other processes may hold lost ranges above that: raise the row by the largest step in use (this process: ${this.lastSize}) ` +
        `× the number of processes, with \`idlease tag bump ${shellWord(tag)} --by <n>\` (docs/failover.md).`,
    );
  }

  private unknownTag(): IdleaseError {
    const { tag, table, schema } = this.options;
    const what = `Tag ${JSON.stringify(tag)} has no row in ${table}.`;
    const flags = `${schema !== undefined ? ` --schema ${schema}` : ''}${table !== 'idlease_segments' ? ` --table ${table}` : ''}`;
    return new IdleaseError(
      'UNKNOWN_TAG',
      `${what} Add it: \`idlease tag add ${shellWord(tag)}\` (or addTag(knex, { tag: ${JSON.stringify(tag)} })), ` +
        `or pass create: { start, step } to ${this.hooks.creator}.`,
      {
        cli: {
          message: `${what} Add it: \`{idlease} tag add ${shellWord(tag)}${flags}\`, or pass --create (with --start/--step) to add it here.`,
        },
      },
    );
  }
}

/**
 * Whether the lease that made (start − 1, …] took the row's failover jump (dialects/segments.ts):
 * a jumped range starts on a multiple of the gap, at least a gap above the row read just before.
 * Another process's jump in between leaves our range starting at its end, off the multiple while
 * steps stay below the gap (docs/failover.md asks that of the gap anyway). Counted, never acted on.
 */
function tookFailoverJump(row: { maxId: bigint; failoverGap?: bigint }, start: bigint): boolean {
  const gap = row.failoverGap;
  if (gap === undefined || gap <= 0n) return false;
  const from = start - 1n;
  return from % gap === 0n && from >= row.maxId + gap;
}

/** The `lease-error` event both mechanisms emit when a lease failed and will be retried after `retryInMs`. */
export interface LeaseErrorEvent {
  readonly type: 'lease-error';
  readonly tag: string;
  readonly error: unknown;
  /** What the driver error means for the connection, when it is one of those. */
  readonly problem: ConnectionProblem | undefined;
  readonly attempt: number;
  readonly retryInMs: number;
}

export function leaseErrorEvent(tag: string, error: unknown, attempt: number, retryInMs: number): LeaseErrorEvent {
  return { type: 'lease-error', tag, error, problem: connectionProblem(error), attempt, retryInMs };
}
