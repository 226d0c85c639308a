/**
 * Everything the segment allocator relies on from a SegmentStore, as named async checks that
 * throw on failure: run them with any test runner against a store of your own (Redis, DynamoDB,
 * a wrapper with metrics) before an allocator trusts it. idlease runs the same checks against
 * each of its stores (test/integration/store-conformance.test.ts).
 *
 *   for (const check of segmentStoreConformance(() => harness)) it(check.name, check.run);
 */
import type { SegmentStore } from '../segment/store.js';
import { MAX_INT64 } from '../ids.js';
import { isFatalCode } from '../errors.js';
import { SEGMENT_LEASE_RETRIED } from '../segment/types.js';

export interface SegmentStoreHarness {
  /** The store under test, on an empty or shared table: each check uses tags of its own. */
  readonly store: SegmentStore;
  /** The same kind of store pointed at a table (key space) that was never set up: every call must fail NOT_MIGRATED. */
  readonly missingTable: SegmentStore;
  /** The statement deadline `store` was built with. One check waits for it; another sends 32 leases at once, which must all answer within it. */
  readonly statementTimeoutMs: number;
  /**
   * Make the store's next statements on `tag` unable to answer (a row lock held by another
   * session, a paused server, a held connection); resolve once that is in place, to a function
   * that lifts it. The row exists when this is called.
   */
  stall(tag: string): Promise<() => Promise<void>>;
  /** Prefix for the tags the checks create. Default 'conformance'. */
  readonly tagPrefix?: string;
}

export interface SegmentStoreCheck {
  readonly name: string;
  run(): Promise<void>;
}

class ConformanceFailure extends Error {
  override readonly name = 'ConformanceFailure';
}

/** The part of read() every store answers (failoverGap is optional: only fencing stores have it). */
const rowOf = (r: { maxId: bigint; step: number } | undefined) => r && { maxId: r.maxId, step: r.step };

function fail(check: string, what: string): never {
  throw new ConformanceFailure(`segment store conformance, ${check}: ${what}`);
}

const show = (x: unknown): string => JSON.stringify(x, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v));

function same(check: string, what: string, got: unknown, want: unknown): void {
  if (show(got) !== show(want)) fail(check, `${what}: expected ${show(want)}, got ${show(got)}`);
}

async function leased(check: string, store: SegmentStore, tag: string, step: number): Promise<bigint> {
  const res = await store.lease(tag, step);
  if (res.kind !== 'leased') fail(check, `lease(${JSON.stringify(tag)}, ${step}) answered ${show(res)}, expected kind 'leased'`);
  if (typeof res.end !== 'bigint') fail(check, `lease end must be a bigint, got ${typeof res.end} ${String(res.end)}`);
  return res.end;
}

/** A code, read by shape: a store may bring its own copy of idlease (and so its own IdleaseError class). */
const codeOf = (err: unknown): unknown => (err as { code?: unknown } | null)?.code;

let runs = 0;

export function segmentStoreConformance(harness: () => SegmentStoreHarness | Promise<SegmentStoreHarness>): SegmentStoreCheck[] {
  const session = `${Date.now().toString(36)}${(runs++).toString(36)}`;
  let n = 0;
  const tagFor = (h: SegmentStoreHarness, label: string) => `${h.tagPrefix ?? 'conformance'}_${session}_${n++}_${label}`.slice(0, 128);

  const checks: Array<[string, (h: SegmentStoreHarness, name: string) => Promise<void>]> = [
    [
      'create inserts a missing row once and never changes an existing one',
      async (h, name) => {
        const tag = tagFor(h, 'create');
        same(name, 'read() of a tag never created', await h.store.read(tag), undefined);
        same(name, 'first create()', await h.store.create(tag, 999n, 7, 'first'), true);
        same(name, 'second create() of the same tag', await h.store.create(tag, 5n, 9, 'second'), false);
        same(name, 'read() after both creates', rowOf(await h.store.read(tag)), { maxId: 999n, step: 7 });
      },
    ],

    [
      'lease adds the step and answers the new max_id; the caller owns (end − step, end]',
      async (h, name) => {
        const tag = tagFor(h, 'lease');
        await h.store.create(tag, 0n, 1000, '');
        same(name, 'lease(10) from 0', await leased(name, h.store, tag, 10), 10n);
        same(name, 'lease(5) after it', await leased(name, h.store, tag, 5), 15n);
        same(name, 'lease(1) after it', await leased(name, h.store, tag, 1), 16n);
        same(name, 'read() after three leases', rowOf(await h.store.read(tag)), { maxId: 16n, step: 1000 });
      },
    ],

    [
      'concurrent leases with mixed steps never overlap and leave no gap',
      async (h, name) => {
        const tag = tagFor(h, 'concurrent');
        await h.store.create(tag, 0n, 1000, '');
        const steps = Array.from({ length: 32 }, (_, i) => [1, 7, 1000, 20_000, 3][i % 5]!);
        const ends = await Promise.all(steps.map((s) => leased(name, h.store, tag, s)));
        const ranges = ends.map((end, i) => ({ start: end - BigInt(steps[i]!) + 1n, end })).sort((a, b) => (a.start < b.start ? -1 : 1));
        let next = 1n;
        for (const r of ranges) {
          if (r.start !== next)
            fail(name, `ranges overlap or leave a gap: a range starts at ${r.start}, expected ${next} (ranges ${show(ranges)})`);
          next = r.end + 1n;
        }
        const total = steps.reduce((a, s) => a + BigInt(s), 0n);
        same(name, 'max_id after every lease', (await h.store.read(tag))?.maxId, total);
      },
    ],

    [
      'giveBack lowers max_id only while it is still exactly expectedEnd',
      async (h, name) => {
        const tag = tagFor(h, 'giveback');
        await h.store.create(tag, 0n, 1000, '');
        const first = await leased(name, h.store, tag, 100);
        const second = await leased(name, h.store, tag, 50);
        same(name, 'giveBack of the first lease after a later one', await h.store.giveBack(tag, first, 60n), false);
        same(name, 'max_id after a refused giveBack', (await h.store.read(tag))?.maxId, second);
        same(name, 'giveBack of the latest lease', await h.store.giveBack(tag, second, 120n), true);
        same(name, 'max_id after giveBack', (await h.store.read(tag))?.maxId, 120n);
        same(name, 'the same giveBack again', await h.store.giveBack(tag, second, 100n), false);
        same(name, 'lease(10) after giveBack', await leased(name, h.store, tag, 10), 130n);
        same(name, 'giveBack on a tag with no row', await h.store.giveBack(tagFor(h, 'nogive'), 10n, 5n), false);
      },
    ],

    [
      'a tag with no row: lease answers unknown and creates nothing',
      async (h, name) => {
        const tag = tagFor(h, 'unknown');
        same(name, 'lease() of a tag with no row', await h.store.lease(tag, 10), { kind: 'unknown' });
        same(name, 'read() after that lease', await h.store.read(tag), undefined);
      },
    ],

    [
      'a regressed row (restored, failed over, lowered by hand) is answered as it is',
      async (h, name) => {
        const tag = tagFor(h, 'regressed');
        await h.store.create(tag, 0n, 1000, '');
        const end = await leased(name, h.store, tag, 1000);
        // The store must not hide a row that went backwards: the allocator detects it and refuses the range.
        if (!(await h.store.giveBack(tag, end, 10n))) fail(name, 'could not lower the row with giveBack to stage the regression');
        same(name, 'lease(5) on the regressed row', await leased(name, h.store, tag, 5), 15n);
      },
    ],

    [
      'IDs past 2^53 are exact in every operation',
      async (h, name) => {
        const tag = tagFor(h, 'past53');
        const base = 2n ** 53n;
        same(name, 'create at 2^53 − 2', await h.store.create(tag, base - 2n, 1000, ''), true);
        same(name, 'read() at 2^53 − 2', (await h.store.read(tag))?.maxId, base - 2n);
        const ends: bigint[] = [];
        for (const step of [1, 1, 1, 3, 1]) ends.push(await leased(name, h.store, tag, step));
        same(name, 'lease ends across 2^53', ends, [base - 1n, base, base + 1n, base + 4n, base + 5n]);
        same(name, 'read() past 2^53', (await h.store.read(tag))?.maxId, base + 5n);
        same(name, 'giveBack from 2^53 + 5 to 2^53 + 1', await h.store.giveBack(tag, base + 5n, base + 1n), true);
        same(
          name,
          'giveBack expecting 2^53 + 2 (off by one, a rounded value would match)',
          await h.store.giveBack(tag, base + 2n, base),
          false,
        );
        same(name, 'read() after giveBack', (await h.store.read(tag))?.maxId, base + 1n);
      },
    ],

    [
      'near 2^63 − 1: exact, full when a step does not fit, never wraps',
      async (h, name) => {
        const tag = tagFor(h, 'near63');
        same(name, 'create at 2^63 − 1 − 10', await h.store.create(tag, MAX_INT64 - 10n, 1000, ''), true);
        same(name, 'lease(11) past 2^63 − 1', await h.store.lease(tag, 11), { kind: 'full', maxId: MAX_INT64 - 10n });
        same(name, 'lease(7)', await leased(name, h.store, tag, 7), MAX_INT64 - 3n);
        same(name, 'lease(3) up to 2^63 − 1 exactly', await leased(name, h.store, tag, 3), MAX_INT64);
        same(name, 'lease(1) at 2^63 − 1', await h.store.lease(tag, 1), { kind: 'full', maxId: MAX_INT64 });
        same(name, 'read() at the end', rowOf(await h.store.read(tag)), { maxId: MAX_INT64, step: 1000 });
      },
    ],

    [
      'a missing table fails every call with NOT_MIGRATED',
      async (h, name) => {
        const tag = tagFor(h, 'missing');
        const calls: Array<[string, () => Promise<unknown>]> = [
          ['read', () => h.missingTable.read(tag)],
          ['lease', () => h.missingTable.lease(tag, 10)],
          ['giveBack', () => h.missingTable.giveBack(tag, 10n, 5n)],
          ['create', () => h.missingTable.create(tag, 0n, 1000, '')],
        ];
        for (const [op, call] of calls) {
          let err: unknown;
          try {
            await call();
          } catch (e) {
            err = e;
          }
          if (codeOf(err) !== 'NOT_MIGRATED')
            fail(
              name,
              `${op}() on a missing table must reject with code NOT_MIGRATED, got ${err === undefined ? 'no error' : `${codeOf(err) ?? 'no code'}: ${(err as Error)?.message}`}`,
            );
        }
      },
    ],

    [
      'a statement that does not answer fails at the deadline with an error the allocator retries',
      async (h, name) => {
        const tag = tagFor(h, 'deadline');
        await h.store.create(tag, 0n, 1000, '');
        const before = await leased(name, h.store, tag, 10);
        const release = await h.stall(tag);
        const t0 = Date.now();
        let err: unknown;
        try {
          await h.store.lease(tag, 10);
        } catch (e) {
          err = e;
        } finally {
          await release();
        }
        const ms = Date.now() - t0;
        if (err === undefined) fail(name, 'lease() on a stalled row answered; stall() must keep the store from answering');
        if (ms < h.statementTimeoutMs * 0.9)
          fail(name, `lease() failed after ${ms} ms, before the ${h.statementTimeoutMs} ms deadline: ${(err as Error)?.message}`);
        if (ms > h.statementTimeoutMs + 2_000)
          fail(name, `lease() took ${ms} ms to fail, far past the ${h.statementTimeoutMs} ms deadline`);
        // The codes after which the allocator stops retrying: a stalled statement must not raise one of them.
        if (isFatalCode(codeOf(err), SEGMENT_LEASE_RETRIED))
          fail(name, `a missed deadline must be retryable, got code ${String(codeOf(err))}`);
        // The stalled statement may still run after the release; either way the next lease is above both.
        const after = await leased(name, h.store, tag, 10);
        if (after <= before) fail(name, `lease after the stall answered ${after}, not above the earlier ${before}`);
      },
    ],
  ];

  return checks.map(([name, body]) => Object.freeze({ name, run: () => Promise.resolve(harness()).then((h) => body(h, name)) }));
}
