/** The chaos harness's own pure parts (test/chaos): the schedule is its seed's, and the checker catches what it must. */
import fc from 'fast-check';
import { expect, it } from 'vitest';
import { checkStreams, type Stream } from '../chaos/check.js';
import { FAULT_KINDS, scheduleFor } from '../chaos/schedule.js';

const stream = (space: string, name: string, ids: number[]): Stream => ({ space, name, ids: BigInt64Array.from(ids.map(BigInt)) });

it('the same seed draws the same schedule; another seed another; every kind comes up in a minute', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 2 ** 31 - 1 }), (seed) => {
      expect(scheduleFor(seed, 60)).toEqual(scheduleFor(seed, 60));
      const kinds = new Set(scheduleFor(seed, 60).map((f) => f.kind));
      expect(kinds.size).toBe(FAULT_KINDS.length);
      for (const f of scheduleFor(seed, 60)) expect(f.atMs).toBeLessThan(52_000);
    }),
  );
  expect(scheduleFor(1, 60)).not.toEqual(scheduleFor(2, 60));
});

it('the checker finds a repeat planted across two processes of a space, and none across spaces', () => {
  const clean = checkStreams([stream('a', 'p1', [1, 2, 3]), stream('a', 'p2', [4, 5]), stream('b', 'q', [1, 2])]);
  expect(clean.map((s) => s.repeats)).toEqual([0, 0]);
  const planted = checkStreams([stream('a', 'p1', [1, 2, 3]), stream('a', 'p2', [3, 4])]);
  expect(planted[0]).toMatchObject({ repeats: 1, examples: ['3'] });
});

it('the checker finds a process whose IDs go back or stand still', () => {
  const [r] = checkStreams([stream('a', 'p1', [1, 2, 2, 3]), stream('a', 'p2', [5, 4])]);
  expect(r!.orderViolations).toHaveLength(2);
  expect(r!.repeats).toBe(1);
});
