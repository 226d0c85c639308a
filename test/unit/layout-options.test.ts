import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { DEFAULT_LAYOUT, resolveLayout, validateShard } from '../../src/layout/index.js';
import { resolveNextIdOptions } from '../../src/migrations/next-id.js';
import { planMigrations } from '../../src/migrations/migrate.js';
import { codeOf } from '../helpers/in-process.js';

const code = codeOf;

const NOW = Date.UTC(2026, 0, 1);

describe('resolveLayout', () => {
  it('defaults to 41 + 10 + 12 bits from 2024-01-01, sign bit clear, frozen', () => {
    const l = resolveLayout({}, NOW);
    expect(l).toEqual(DEFAULT_LAYOUT);
    expect(l.timeBits + l.shardBits + l.sequenceBits).toBeLessThanOrEqual(63);
    expect(Object.isFrozen(l)).toBe(true);
  });

  it('accepts exactly the layouts with every field >= 1 bit and at most 63 in all', () => {
    fc.assert(
      fc.property(fc.integer({ min: -3, max: 70 }), fc.integer({ min: -3, max: 70 }), fc.integer({ min: -3, max: 70 }), (t, h, s) => {
        const valid = t >= 1 && h >= 1 && s >= 1 && t + h + s <= 63 && t <= 61 && h <= 31 && s <= 31;
        // A tiny time field from an old epoch is already full: keep the epoch at NOW for this property.
        const c = code(() => resolveLayout({ timeBits: t, shardBits: h, sequenceBits: s, epoch: NOW }, NOW));
        expect(c).toBe(valid ? undefined : 'BAD_CONFIG');
      }),
      { numRuns: 1000 },
    );
  });

  it('refuses bad epochs: future, before 1970, unparseable, or with the time field already full', () => {
    expect(code(() => resolveLayout({ epoch: NOW + 1 }, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout({ epoch: -1 }, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout({ epoch: '1969-12-31T23:59:59Z' }, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout({ epoch: 'yesterday' }, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout({ epoch: 1.5 }, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout({ epoch: new Date(Number.NaN) }, NOW))).toBe('BAD_CONFIG');
    // 2^30 ms is about 12.4 days.
    expect(code(() => resolveLayout({ timeBits: 30, epoch: NOW - 13 * 86_400_000 }, NOW))).toBe('BAD_CONFIG');
    expect(resolveLayout({ timeBits: 30, epoch: NOW - 12 * 86_400_000 }, NOW).timeBits).toBe(30);
    expect(resolveLayout({ epoch: '2020-02-02T00:00:00Z' }, NOW).epochMs).toBe(Date.UTC(2020, 1, 2));
    expect(resolveLayout({ epoch: new Date(0) }, NOW).epochMs).toBe(0);
  });

  it('refuses unknown keys and non-objects', () => {
    expect(code(() => resolveLayout({ timebits: 40 } as never, NOW))).toBe('BAD_CONFIG');
    expect(code(() => resolveLayout(null as never, NOW))).toBe('BAD_CONFIG');
  });

  it('validateShard keeps shard ids inside shardBits', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 20 }), fc.integer({ min: -5, max: 2 ** 21 }), (shardBits, shard) => {
        const layout = resolveLayout({ shardBits, timeBits: 30, epoch: NOW }, NOW);
        const ok = shard >= 0 && shard < 2 ** shardBits;
        expect(code(() => validateShard(shard, layout))).toBe(ok ? undefined : 'BAD_CONFIG');
      }),
    );
  });
});

describe('resolveNextIdOptions', () => {
  it('expands shards into one schema each with consecutive shard ids', () => {
    const r = resolveNextIdOptions({ schema: 'insta', shard: 5, shards: 3 });
    expect(r.map((x) => [x.schema, x.shard])).toEqual([
      ['insta_5', 5],
      ['insta_6', 6],
      ['insta_7', 7],
    ]);
    expect(Object.isFrozen(r[0])).toBe(true);
  });

  it('defaults to one shard 0 in public', () => {
    expect(resolveNextIdOptions(true).map((x) => [x.schema, x.shard])).toEqual([['public', 0]]);
    expect(resolveNextIdOptions(false)).toEqual([]);
    expect(resolveNextIdOptions(undefined)).toEqual([]);
  });

  it('refuses bad options up front', () => {
    const bad: unknown[] = [
      { schema: 'Bad-Name' },
      { schema: 'x; drop table y' },
      { shard: -1 },
      { shard: 1024 },
      { shard: 4, shardBits: 2 },
      { shard: 1.5 },
      { shards: 0 },
      { shards: 2, shard: 1023 }, // 1024 does not fit 10 bits
      { timeBits: 41, shardBits: 11, sequenceBits: 12 },
      { sequenceBits: 0 },
      { epoch: '2999-01-01' },
      { epoch: -5 },
      { dropDependentDefaults: 'yes' },
      { shardz: 3 },
      [],
      [
        { schema: 'a', shard: 1 },
        { schema: 'b', shard: 1 },
      ], // same shard twice: IDs would collide
      [
        { schema: 'a', shard: 1 },
        { schema: 'a', shard: 2 },
      ],
      [
        { schema: 'a_1', shard: 9 },
        { schema: 'a', shard: 1, shards: 2 },
      ], // a_1 twice
      'yes',
      7,
    ];
    for (const b of bad)
      expect(
        code(() => resolveNextIdOptions(b as never)),
        JSON.stringify(b),
      ).toBe('BAD_CONFIG');
  });

  it('is one shard per database on MySQL (schema and shards refused) and named once per schema', () => {
    expect(planMigrations('mysql', { segments: false, nextId: true }).migrations.map((m) => m.name)).toEqual(['next_id', 'next_id:v2']);
    expect(code(() => planMigrations('mysql', { nextId: { schema: 'a', shard: 1 } }))).toBe('BAD_CONFIG');
    expect(code(() => planMigrations('mysql', { nextId: { shard: 1, shards: 4 } }))).toBe('BAD_CONFIG');
    const plan = planMigrations('postgres', {
      segments: false,
      nextId: [
        { schema: 'a', shard: 1 },
        { schema: 'b', shard: 2 },
      ],
    });
    expect(plan.migrations.map((m) => m.name)).toEqual(['next_id:a', 'next_id:a:v2', 'next_id:b', 'next_id:b:v2']);
  });
});
