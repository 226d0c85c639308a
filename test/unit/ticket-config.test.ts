import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { backoffMs } from '../../src/runtime/backoff.js';
import { belongsTo, firstAbove, isExhausted, refuseReason, validateServerSet } from '../../src/ticket/config.js';
import { resolveTicketsOptions } from '../../src/migrations/tickets.js';
import { MAX_INT64 } from '../../src/ids.js';

const code = (fn: () => unknown): string | undefined => {
  try {
    fn();
    return undefined;
  } catch (e) {
    return (e as { code?: string }).code;
  }
};

describe('validateServerSet', () => {
  it('accepts exactly the sets whose residue classes are disjoint', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -2, max: 12 }), { maxLength: 8 }), fc.integer({ min: -1, max: 10 }), (offsets, increment) => {
        const ok =
          offsets.length > 0 &&
          increment >= 1 &&
          increment >= offsets.length &&
          offsets.every((o) => o >= 1 && o <= increment) &&
          new Set(offsets).size === offsets.length;
        expect(code(() => validateServerSet(offsets, increment))).toBe(ok ? undefined : 'BAD_CONFIG');
      }),
    );
  });

  it('an accepted set never lets two servers issue the same ID', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 9 }),
        fc.integer({ min: 1, max: 9 }),
        fc.bigInt({ min: 1n, max: MAX_INT64 }),
        (offsets, increment, id) => {
          if (code(() => validateServerSet(offsets, increment))) return;
          expect(offsets.filter((o) => belongsTo(id, increment, o)).length).toBeLessThanOrEqual(1);
        },
      ),
    );
  });

  it('refuses non-integers and the classic mistakes', () => {
    expect(code(() => validateServerSet([1, 1], 2))).toBe('BAD_CONFIG');
    expect(code(() => validateServerSet([1, 3], 2))).toBe('BAD_CONFIG');
    expect(code(() => validateServerSet([1, 2], 1))).toBe('BAD_CONFIG');
    expect(code(() => validateServerSet([1.5], 2))).toBe('BAD_CONFIG');
    expect(code(() => validateServerSet([1], 65536))).toBe('BAD_CONFIG');
    expect(code(() => validateServerSet(['1' as unknown as number], 2))).toBe('BAD_CONFIG');
  });
});

describe('firstAbove', () => {
  it('is the smallest ID above the floor in the residue class', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 1n << 62n }), fc.integer({ min: 1, max: 1000 }), fc.nat(), (floor, increment, o) => {
        const offset = (o % increment) + 1;
        const v = firstAbove(floor, increment, offset);
        expect(v > floor).toBe(true);
        expect(belongsTo(v, increment, offset)).toBe(true);
        expect(v - BigInt(increment) <= floor).toBe(true);
      }),
    );
  });
});

describe('refuseReason', () => {
  it('refuses IDs outside the class, negative (signed overflow) or above 2^63-1', () => {
    expect(refuseReason(7n, 2, 1)).toBeUndefined();
    expect(refuseReason(8n, 2, 2)).toBeUndefined();
    expect(refuseReason(8n, 2, 1)).toMatch(/not ≡ 1/);
    expect(refuseReason(MAX_INT64 + 1n, 1, 1)).toMatch(/exhausted/);
    expect(refuseReason(-(1n << 63n), 1, 1)).toMatch(/exhausted/);
    expect(isExhausted(-1n)).toBe(true);
    expect(isExhausted(MAX_INT64)).toBe(false);
  });
});

describe('backoffMs', () => {
  it('grows, stays within [1, max], never NaN', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: 1, max: 60_000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (f, init, max, r) => {
          const v = backoffMs(f, init, max, () => r);
          expect(v).toBeGreaterThanOrEqual(1);
          expect(v).toBeLessThanOrEqual(Math.max(1, max));
        },
      ),
    );
  });
});

describe('resolveTicketsOptions', () => {
  it('defaults and validation', () => {
    expect(resolveTicketsOptions(undefined)).toBeUndefined();
    expect(resolveTicketsOptions(true)).toEqual({
      sequences: ['default'],
      engine: 'InnoDB',
      increment: 1,
      offset: 1,
      pairGiven: false,
      failoverGap: 10_000_000_000n,
    });
    expect(resolveTicketsOptions({ offset: 1 })).toMatchObject({ increment: 1, offset: 1, pairGiven: true });
    expect(code(() => resolveTicketsOptions({ engine: 'Aria' as 'InnoDB' }))).toBe('BAD_CONFIG');
    expect(code(() => resolveTicketsOptions({ increment: 2, offset: 3 }))).toBe('BAD_CONFIG');
    expect(code(() => resolveTicketsOptions({ sequences: ['Bad-Name'] }))).toBe('BAD_CONFIG');
    expect(code(() => resolveTicketsOptions({ sequences: ['a'.repeat(49)] }))).toBe('BAD_CONFIG');
    expect(code(() => resolveTicketsOptions({ sequences: [] }))).toBe('BAD_CONFIG');
  });
});
