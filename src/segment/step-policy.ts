/**
 * How big the next lease is, and when to start it. Pure functions: the allocator feeds
 * them measurements, property tests feed them anything.
 *
 * The row's `step` (set by `idlease tag set-step`) is the operator's baseline: a lease is
 * never smaller than it unless the process's own `maxStep` says so. Above the baseline
 * the measured rate decides: a lease should last `targetLeaseMs`, so the database sees
 * about one lease per tag per process per `targetLeaseMs` at any load (until `maxStep`).
 * The process's `[minStep, maxStep]` is a hard clamp applied last: it is what a deploy
 * pins, and the range is always derived from what the lease statement added, so processes
 * with different steps never overlap.
 */

export interface StepInputs {
  /** The row's admin step at the time of this lease. */
  readonly rowStep: number;
  readonly minStep: number;
  readonly maxStep: number;
  /** Consumption in IDs per millisecond; undefined before anything was measured. */
  readonly ratePerMs: number | undefined;
  readonly targetLeaseMs: number;
  /** IDs callers are already waiting for (batches that span segments). */
  readonly demand: number;
  /** The previous lease's size (0 before the first): growth is at most ×4 per lease, so a burst measured over a few milliseconds cannot jump to maxStep. */
  readonly previousStep: number;
}

export function chooseStep(i: StepInputs): number {
  let byRate = i.ratePerMs === undefined ? 0 : Math.ceil(i.ratePerMs * i.targetLeaseMs);
  if (i.previousStep > 0) byRate = Math.min(byRate, 4 * i.previousStep);
  const want = Math.max(i.rowStep, byRate, i.demand, 1);
  return Math.min(i.maxStep, Math.max(i.minStep, want));
}

/**
 * How many IDs may remain in the current segment when the next lease starts. Leaf starts
 * at a fixed 10% consumed; here it is time: start when what is left would last less than
 * the horizon (a floor, or many lease latencies, whichever is longer) at the measured rate.
 * Before the first rate is known, start half way through.
 */
export function preloadThreshold(segmentSize: bigint, ratePerMs: number | undefined, horizonMs: number): bigint {
  if (ratePerMs === undefined) return segmentSize / 2n;
  const ids = Math.ceil(ratePerMs * horizonMs);
  if (!Number.isFinite(ids) || BigInt(ids) >= segmentSize) return segmentSize;
  return BigInt(Math.max(1, ids));
}

/** The preload horizon: at least `preloadMs`, and ten lease latencies when the database is slow. */
export function preloadHorizonMs(preloadMs: number, leaseLatencyMs: number | undefined): number {
  return Math.max(preloadMs, 10 * (leaseLatencyMs ?? 0));
}

/** Exponentially weighted moving average; the first sample is taken as is. */
export function ewma(previous: number | undefined, sample: number, alpha = 0.5): number {
  return previous === undefined ? sample : alpha * sample + (1 - alpha) * previous;
}
