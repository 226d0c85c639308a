import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { DEFAULT_LAYOUT, decodeId, encodeId, idFromCounter, layoutLimits, resolveLayout, type IdLayout } from '../../src/layout/index.js';
import { isIdleaseError } from '../../src/errors.js';

/** Any valid layout: time 1…61 bits, shard and sequence 1…31, 63 in all at most. */
const layoutArb: fc.Arbitrary<IdLayout> = fc
  .tuple(
    fc.integer({ min: 1, max: 61 }),
    fc.integer({ min: 1, max: 31 }),
    fc.integer({ min: 1, max: 31 }),
    fc.integer({ min: 0, max: Date.UTC(2025, 0, 1) }),
  )
  .filter(([t, h, s]) => t + h + s <= 63)
  .map(([timeBits, shardBits, sequenceBits, epochMs]) => resolveLayout({ timeBits, shardBits, sequenceBits, epoch: epochMs }, null));

const partsArb = (layout: IdLayout) => {
  const l = layoutLimits(layout);
  return fc.record({
    timeMs: fc.bigInt({ min: 0n, max: l.maxTimeMs }),
    shard: fc.integer({ min: 0, max: l.maxShard }),
    sequence: fc.integer({ min: 0, max: l.maxSequence }),
  });
};

describe('decodeId / encodeId', () => {
  it('round-trips every field of every layout', () => {
    fc.assert(
      fc.property(
        layoutArb.chain((layout) => fc.tuple(fc.constant(layout), partsArb(layout))),
        ([layout, parts]) => {
          const id = encodeId(parts, layout);
          expect(id >= 0n).toBe(true);
          expect(id <= layoutLimits(layout).maxId).toBe(true);
          const d = decodeId(id, layout);
          expect(d.timeMs).toBe(parts.timeMs);
          expect(d.shard).toBe(parts.shard);
          expect(d.sequence).toBe(parts.sequence);
          expect(decodeId(id.toString(), layout).id).toBe(id);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('never produces a negative ID, even at the last millisecond of the time field', () => {
    fc.assert(
      fc.property(layoutArb, (layout) => {
        const l = layoutLimits(layout);
        const id = encodeId({ timeMs: l.maxTimeMs, shard: l.maxShard, sequence: l.maxSequence }, layout);
        expect(id).toBe(l.maxId);
        expect(id > 0n && id < 1n << 63n).toBe(true);
      }),
    );
  });

  it('maps the next_id counter to IDs strictly increasingly (so a monotonic sequence gives unique, ordered IDs)', () => {
    fc.assert(
      fc.property(
        layoutArb.chain((layout) => {
          const maxCounter = (1n << BigInt(layout.timeBits + layout.sequenceBits)) - 1n;
          return fc.tuple(
            fc.constant(layout),
            fc.integer({ min: 0, max: layoutLimits(layout).maxShard }),
            fc.bigInt({ min: 0n, max: maxCounter - 1n }),
            fc.bigInt({ min: 1n, max: maxCounter }),
          );
        }),
        ([layout, shard, a, delta]) => {
          const maxCounter = (1n << BigInt(layout.timeBits + layout.sequenceBits)) - 1n;
          const b = a + delta > maxCounter ? maxCounter : a + delta;
          fc.pre(b > a);
          const ia = idFromCounter(a, shard, layout);
          const ib = idFromCounter(b, shard, layout);
          expect(ib > ia).toBe(true);
          expect(decodeId(ia, layout).shard).toBe(shard);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('decodes the default layout to the known date', () => {
    const id = encodeId({ timeMs: 1000n, shard: 5, sequence: 7 }, DEFAULT_LAYOUT);
    expect(id).toBe((1000n << 22n) | (5n << 12n) | 7n);
    const d = decodeId(id);
    expect(d.timestamp.toISOString()).toBe('2024-01-01T00:00:01.000Z');
    expect(d.shard).toBe(5);
    expect(d.sequence).toBe(7);
  });

  it('refuses numbers, negatives, junk and IDs too wide for the layout', () => {
    const bad: unknown[] = [123, -1n, '-5', '12a', '', 1n << 63n, (1n << 63n).toString(), null, undefined, 1.5];
    for (const v of bad) {
      let caught: unknown;
      try {
        decodeId(v as bigint);
      } catch (err) {
        caught = err;
      }
      expect(isIdleaseError(caught, 'BAD_ARGUMENT'), String(v)).toBe(true);
    }
    const small = resolveLayout({ timeBits: 10, shardBits: 2, sequenceBits: 2 }, null);
    expect(() => decodeId(1n << 14n, small)).toThrowError(/outside/);
    expect(decodeId((1n << 14n) - 1n, small).shard).toBe(3);
  });

  it('refuses out-of-range fields on encode instead of wrapping', () => {
    const l = layoutLimits(DEFAULT_LAYOUT);
    expect(() => encodeId({ timeMs: l.maxTimeMs + 1n, shard: 0, sequence: 0 })).toThrowError(/timeMs/);
    expect(() => encodeId({ timeMs: -1n, shard: 0, sequence: 0 })).toThrowError(/timeMs/);
    expect(() => encodeId({ timeMs: 0n, shard: l.maxShard + 1, sequence: 0 })).toThrowError(/shard/);
    expect(() => encodeId({ timeMs: 0n, shard: 0, sequence: l.maxSequence + 1 })).toThrowError(/sequence/);
    expect(() => encodeId({ timeMs: 0n, shard: 0.5, sequence: 0 })).toThrowError(/shard/);
  });
});
