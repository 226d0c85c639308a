import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  DEFAULT_LAYOUT,
  LAYOUT_PRESETS,
  decodeId,
  encodeId,
  layoutLimits,
  layoutPreset,
  resolveLayout,
  type IdLayout,
} from '../../src/layout/index.js';
import { runMain, codeOf } from '../helpers/in-process.js';

const code = codeOf;

const NOW = Date.UTC(2026, 0, 1);

/** Any valid layout, now with a time unit and either field order. */
const layoutArb: fc.Arbitrary<IdLayout> = fc
  .tuple(
    fc.integer({ min: 1, max: 61 }),
    fc.integer({ min: 1, max: 31 }),
    fc.integer({ min: 1, max: 31 }),
    fc.integer({ min: 0, max: Date.UTC(2025, 0, 1) }),
    fc.integer({ min: 1, max: 86_400_000 }),
    fc.constantFrom('shard-sequence' as const, 'sequence-shard' as const),
  )
  .filter(([t, h, s]) => t + h + s <= 63)
  .map(([timeBits, shardBits, sequenceBits, epochMs, timeUnitMs, order]) =>
    resolveLayout({ timeBits, shardBits, sequenceBits, epoch: epochMs, timeUnitMs, order }, null),
  );

describe('layout presets', () => {
  it('twitter is 41 | 10 | 12 from 2010-11-04T01:42:54.657Z and decodes a real tweet id', () => {
    const t = LAYOUT_PRESETS.twitter;
    expect([t.timeBits, t.shardBits, t.sequenceBits, t.timeUnitMs, t.order]).toEqual([41, 10, 12, 1, 'shard-sequence']);
    expect(new Date(t.epochMs).toISOString()).toBe('2010-11-04T01:42:54.657Z');
    // Hand-computed: (1541815603606036480 >> 22) + epoch = 1656432460105 ms; worker = (id >> 12) & 1023.
    const d = decodeId('1541815603606036480', t);
    expect(d.unixMs).toBe(1656432460105);
    expect(d.shard).toBe(378);
    expect(d.sequence).toBe(0);
  });

  it('sonyflake is 39 bits of 10 ms | 8 sequence | 16 machine, the machine id lowest', () => {
    const s = LAYOUT_PRESETS.sonyflake;
    expect([s.timeBits, s.sequenceBits, s.shardBits, s.timeUnitMs, s.order]).toEqual([39, 8, 16, 10, 'sequence-shard']);
    // Built by hand, bit by bit: time 1000 units, sequence 3, machine 0x0102.
    const id = (1000n << 24n) | (3n << 16n) | 0x0102n;
    const d = decodeId(id, s);
    expect(d.timeMs).toBe(1000n);
    expect(d.sequence).toBe(3);
    expect(d.shard).toBe(0x0102);
    expect(d.unixMs).toBe(s.epochMs + 10_000);
    expect(encodeId({ timeMs: 1000n, shard: 0x0102, sequence: 3 }, s)).toBe(id);
    // 2^39 steps of 10 ms: about 174 years from 2014.
    expect(layoutLimits(s).exhaustedAt.getUTCFullYear()).toBe(2188);
  });

  it('idlease is the default layout; unknown preset names are refused with the list', () => {
    expect(layoutPreset('idlease')).toBe(DEFAULT_LAYOUT);
    expect(code(() => layoutPreset('flake'))).toBe('BAD_CONFIG');
    expect(() => layoutPreset('toString')).toThrow(/Known: idlease, twitter, sonyflake/);
    for (const p of Object.values(LAYOUT_PRESETS)) {
      expect(resolveLayout(p, NOW)).toEqual(p);
      expect(p.timeBits + p.shardBits + p.sequenceBits).toBeLessThanOrEqual(63);
    }
  });
});

describe('custom layouts with a time unit and an order', () => {
  it('round-trips every field, never negative, at most maxId', () => {
    fc.assert(
      fc.property(
        layoutArb.chain((layout) => {
          const l = layoutLimits(layout);
          return fc.tuple(
            fc.constant(layout),
            fc.record({
              timeMs: fc.bigInt({ min: 0n, max: l.maxTimeMs }),
              shard: fc.integer({ min: 0, max: l.maxShard }),
              sequence: fc.integer({ min: 0, max: l.maxSequence }),
            }),
          );
        }),
        ([layout, parts]) => {
          const id = encodeId(parts, layout);
          expect(id >= 0n && id <= layoutLimits(layout).maxId && id < 1n << 63n).toBe(true);
          const d = decodeId(id, layout);
          expect([d.timeMs, d.shard, d.sequence]).toEqual([parts.timeMs, parts.shard, parts.sequence]);
          const unix = BigInt(layout.epochMs) + parts.timeMs * BigInt(layout.timeUnitMs);
          if (unix <= 8_640_000_000_000_000n) expect(d.unixMs).toBe(Number(unix));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('is ordered by time first, whatever the order of the low fields', () => {
    fc.assert(
      fc.property(layoutArb, fc.nat(), fc.nat(), (layout, a, b) => {
        const l = layoutLimits(layout);
        fc.pre(l.maxTimeMs >= 1n);
        const low = encodeId({ timeMs: 0n, shard: l.maxShard, sequence: l.maxSequence }, layout);
        const high = encodeId({ timeMs: 1n, shard: a % (l.maxShard + 1), sequence: b % (l.maxSequence + 1) }, layout);
        expect(high > low).toBe(true);
      }),
    );
  });

  it('refuses bad units and orders, and a time field the unit has already filled', () => {
    for (const timeUnitMs of [0, -1, 1.5, 86_400_001, '10' as unknown as number])
      expect(code(() => resolveLayout({ timeUnitMs }, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout({ order: 'sequence-first' as never }, NOW))).toBe('BAD_CONFIG');
    // 20 bits of ms from 2025 ran out after ~17 minutes; of 1000 ms steps, after ~12 days; of a day, after 2870 years.
    expect(code(() => resolveLayout({ timeBits: 20, epoch: Date.UTC(2025, 0, 1) }, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout({ timeBits: 20, epoch: Date.UTC(2025, 0, 1), timeUnitMs: 1000 }, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout({ timeBits: 20, epoch: Date.UTC(2025, 0, 1), timeUnitMs: 86_400_000 }, NOW))).toBeUndefined();
  });
});

describe('idlease decode --preset', () => {
  const run = runMain;

  it('decodes twitter, sonyflake and idlease IDs, and single flags override a preset', async () => {
    const tw = await run(['--json', 'decode', '1541815603606036480', '--preset', 'twitter']);
    expect(tw.code).toBe(0);
    expect(JSON.parse(tw.out)).toMatchObject({ timestamp: '2022-06-28T16:07:40.105Z', shard: 378, sequence: 0 });
    const sony = (1000n << 24n) | (3n << 16n) | 0x0102n;
    const sf = await run(['--json', 'decode', sony.toString(), '--preset', 'sonyflake']);
    expect(JSON.parse(sf.out)).toMatchObject({ timestamp: '2014-09-01T00:00:10.000Z', shard: 0x0102, sequence: 3 });
    const own = await run(['--json', 'decode', sony.toString(), '--preset', 'sonyflake', '--epoch', '2020-01-01T00:00:00Z']);
    expect(JSON.parse(own.out)).toMatchObject({ timestamp: '2020-01-01T00:00:10.000Z', shard: 0x0102 });
    const id = encodeId({ timeMs: 5n, shard: 7, sequence: 9 }, DEFAULT_LAYOUT);
    expect(JSON.parse((await run(['--json', 'decode', id.toString(), '--preset', 'idlease'])).out)).toMatchObject({
      shard: 7,
      sequence: 9,
    });
    const bad = await run(['decode', '1', '--preset', 'nope']);
    expect(bad.code).not.toBe(0);
    expect(bad.err).toMatch(/Unknown layout preset "nope"/);
  });
});
