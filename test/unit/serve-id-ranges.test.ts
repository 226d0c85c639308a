/** serve's batch body written from ranges (src/serve/http.ts): the same JSON as one string per ID. */
import fc from 'fast-check';
import { expect, it } from 'vitest';
import { MAX_INT64 } from '../../src/ids.js';
import { encodeIdRanges } from '../../src/serve/http.js';

function expand(ranges: { start: bigint; end: bigint }[]): string[] {
  const out: string[] = [];
  for (const r of ranges) for (let id = r.start; id <= r.end; id++) out.push(id.toString());
  return out;
}

// Starts where a carry lengthens the number (…999 → …000), near 2^53 and near 2^63 − 1.
const startArb = fc.oneof(
  fc.bigInt({ min: 1n, max: 10n ** 6n }),
  fc.constantFrom(9n, 99n, 995n, 999_999_990n, 2n ** 53n - 3n, 999_999_999_999_999_990n, MAX_INT64 - 40n),
  fc.bigInt({ min: 1n, max: MAX_INT64 - 100n }),
);
const rangesArb = fc.array(fc.tuple(startArb, fc.integer({ min: 0, max: 30 })), { minLength: 1, maxLength: 4 }).map((xs) => {
  // Ascending and apart, as an allocator hands them out.
  const ranges: { start: bigint; end: bigint }[] = [];
  let floor = 0n;
  for (const [s, len] of [...xs].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) {
    const start = s > floor ? s : floor + 1n;
    const end = start + BigInt(len) > MAX_INT64 ? MAX_INT64 : start + BigInt(len);
    if (start > MAX_INT64) break;
    ranges.push({ start, end });
    floor = end + 1n;
  }
  return ranges;
});

it('encodes ranges as {"ids": [...]} with every ID as a decimal string, across digit carries and up to 2^63 − 1', () => {
  fc.assert(
    fc.property(rangesArb, (ranges) => {
      const body = encodeIdRanges(ranges).toString();
      expect(JSON.parse(body)).toEqual({ ids: expand(ranges) });
    }),
    { numRuns: 500 },
  );
});

it('a 10,000-ID batch across the 10^18 boundary', () => {
  const start = 10n ** 18n - 5_000n;
  const body = encodeIdRanges([{ start, end: start + 9_999n }]).toString();
  expect(body).toBe(JSON.stringify({ ids: expand([{ start, end: start + 9_999n }]) }));
});
