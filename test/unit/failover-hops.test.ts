/**
 * The failover jump counts promotions where the instance can (PostgreSQL timelines): two promotions
 * in a row, the second losing the first one's jump, must not land on the same multiple of the gap.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { instanceHops } from '../../src/dialects/instance.js';
import { failoverTarget } from '../../src/dialects/tickets.js';

const tl = (n: number) => `pg:tl${n.toString(16).toUpperCase().padStart(8, '0')}`;

describe('instanceHops', () => {
  it('counts timelines between a PostgreSQL row and this server, 1 to 1,000', () => {
    expect(instanceHops(tl(1), tl(2))).toBe(1);
    expect(instanceHops(tl(1), tl(3))).toBe(2);
    expect(instanceHops(tl(9), tl(0x1a))).toBe(17);
    expect(instanceHops(tl(5), tl(2))).toBe(1); // another branch: at least one gap
    expect(instanceHops(tl(1), tl(5_000))).toBe(1_000);
  });
  it('is 1 where instances have no order (MariaDB server_ids, Galera, a row from before the fence)', () => {
    expect(instanceHops('mariadb:1', 'mariadb:3')).toBe(1);
    expect(instanceHops(null, tl(4))).toBe(1);
    expect(instanceHops('old-primary', tl(4))).toBe(1);
    expect(instanceHops(tl(1), 'galera:c')).toBe(1);
  });
});

describe('failoverTarget with hops', () => {
  it('is at least hops gaps above the highest ticket, keeps the residue, and a later timeline lands past an earlier one’s whole gap', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: 10n ** 15n }),
        fc.bigInt({ min: 1n, max: 10n ** 12n }),
        fc.integer({ min: 1, max: 9 }),
        fc.integer({ min: 1, max: 5 }),
        (highest, gap, increment, hops) => {
          const pair = { increment, offset: 1 + (Number(highest % BigInt(increment)) % increment) };
          const t = failoverTarget(highest, gap, pair, hops);
          expect(t).toBeGreaterThanOrEqual(highest + BigInt(hops) * gap);
          expect(((t % BigInt(increment)) - (BigInt(pair.offset) % BigInt(increment)) + BigInt(increment)) % BigInt(increment)).toBe(0n);
          // What the earlier promotion could hand out before the later one lost it is less than a gap.
          expect(failoverTarget(highest, gap, pair, hops + 1)).toBeGreaterThanOrEqual(t + gap - BigInt(increment));
        },
      ),
    );
  });
});
