import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { backoffMs } from '../../src/runtime/backoff.js';
import { chooseStep, preloadHorizonMs, preloadThreshold } from '../../src/segment/step-policy.js';

const inputs = fc.record({
  rowStep: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
  minStep: fc.integer({ min: 1, max: 1_000_000 }),
  span: fc.integer({ min: 0, max: 10_000_000 }),
  ratePerMs: fc.option(fc.double({ min: 0, max: 1e6, noNaN: true }), { nil: undefined }),
  targetLeaseMs: fc.integer({ min: 1, max: 3_600_000 }),
  demand: fc.nat(1_000_000),
  previousStep: fc.nat(10_000_000),
});

describe('step policy', () => {
  it('always stays within [minStep, maxStep] and is a positive integer', () => {
    fc.assert(
      fc.property(inputs, (i) => {
        const s = chooseStep({ ...i, maxStep: i.minStep + i.span });
        expect(Number.isInteger(s)).toBe(true);
        expect(s).toBeGreaterThanOrEqual(i.minStep);
        expect(s).toBeLessThanOrEqual(i.minStep + i.span);
      }),
    );
  });

  it('never goes below the row step unless maxStep says so, and covers waiting demand when it can', () => {
    fc.assert(
      fc.property(inputs, (i) => {
        const maxStep = i.minStep + i.span;
        const s = chooseStep({ ...i, maxStep });
        expect(s).toBeGreaterThanOrEqual(Math.min(maxStep, i.rowStep));
        expect(s).toBeGreaterThanOrEqual(Math.min(maxStep, i.demand));
      }),
    );
  });

  it('sizes a lease to last targetLeaseMs at the measured rate, growing at most ×4 per lease', () => {
    const base = { rowStep: 1000, minStep: 1, maxStep: 10_000_000, targetLeaseMs: 60_000, demand: 0 };
    // 1,000 IDs/s for 60 s = 60,000 IDs.
    expect(chooseStep({ ...base, ratePerMs: 1, previousStep: 100_000 })).toBe(60_000);
    expect(chooseStep({ ...base, ratePerMs: 1, previousStep: 1000 })).toBe(4000);
    // Idle: back to the operator's baseline.
    expect(chooseStep({ ...base, ratePerMs: 0, previousStep: 60_000 })).toBe(1000);
    // A huge rate is capped by maxStep: leases per second = rate / maxStep.
    expect(chooseStep({ ...base, ratePerMs: 1e6, previousStep: 10_000_000 })).toBe(10_000_000);
    // Leases per process per targetLeaseMs stay at ~1 whatever the rate (until maxStep).
    fc.assert(
      fc.property(fc.double({ min: 0.02, max: 100, noNaN: true }), (rate) => {
        const s = chooseStep({ ...base, ratePerMs: rate, previousStep: 10_000_000 });
        const leaseLastsMs = s / rate;
        expect(leaseLastsMs).toBeGreaterThanOrEqual(60_000 - 1 / rate);
      }),
    );
  });

  it('preloads by time left, not a fixed fraction', () => {
    expect(preloadThreshold(1000n, undefined, 1000)).toBe(500n);
    expect(preloadThreshold(1_000_000n, 10, 1000)).toBe(10_000n); // 10 IDs/ms × 1 s
    expect(preloadThreshold(1000n, 10, 1000)).toBe(1000n); // segment shorter than the horizon: preload at once
    expect(preloadHorizonMs(1000, 500)).toBe(5000); // slow database: ten lease latencies
    fc.assert(
      fc.property(
        fc.bigInt({ min: 1n, max: 2n ** 40n }),
        fc.option(fc.double({ min: 0, max: 1e7, noNaN: true }), { nil: undefined }),
        fc.nat(100_000),
        (size, rate, h) => {
          const t = preloadThreshold(size, rate, h);
          expect(t >= 0n && t <= size).toBe(true);
        },
      ),
    );
  });

  it('backs off by doubling with jitter, capped', () => {
    fc.assert(
      fc.property(
        fc.nat(100),
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: 1000, max: 60_000 }),
        fc.double({ min: 0, max: 0.999, noNaN: true }),
        (a, lo, hi, r) => {
          const d = backoffMs(a, lo, hi, () => r);
          expect(d).toBeGreaterThanOrEqual(1);
          expect(d).toBeLessThanOrEqual(Math.ceil(hi * 1.25));
        },
      ),
    );
    expect(backoffMs(0, 100, 10_000, () => 0.5)).toBe(100);
    expect(backoffMs(3, 100, 10_000, () => 0.5)).toBe(800);
    expect(backoffMs(30, 100, 10_000, () => 0.5)).toBe(10_000);
  });
});
