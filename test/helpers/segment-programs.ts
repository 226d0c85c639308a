/**
 * Random programs of next() / nextInMemory() / nextBatch(n) / stats() / close() calls for segment allocators
 * sharing one tag, with batch sizes chosen at call time around the buffer's edges, and a
 * checker for what every program must show. Used by the scheduler property (in-memory store)
 * and by the same programs run bare against MariaDB, PostgreSQL and PGlite.
 */
import fc from 'fast-check';
import { expect } from 'vitest';
import { isIdleaseError } from '../../src/errors.js';
import type { SegmentAllocator, SegmentEvent } from '../../src/segment/index.js';

/** Batch sizes relative to what the allocator holds when the call is made. */
export type SizeSpec = 'remaining-1' | 'remaining' | 'remaining+1' | 'step' | '2step+3' | 'beyond-maxStep' | 'one';

export type Call =
  | { readonly op: 'next' }
  | { readonly op: 'now' }
  | { readonly op: 'batch'; readonly size: SizeSpec }
  | { readonly op: 'stats' }
  | { readonly op: 'close' };

/**
 * What a caller does before its next call: nothing (awaited bare, as users write it), a few
 * extra microtask ticks, or a pause the scheduler releases whenever it likes.
 */
export type Gap = 0 | 1 | 2 | 3 | 'scheduled';

export interface CallerStep {
  readonly call: Call;
  readonly gap: Gap;
}

export interface AllocatorPlan {
  readonly minStep: number;
  readonly maxStep: number;
  /** Each caller runs its steps in order; callers of one allocator run concurrently. */
  readonly callers: readonly (readonly CallerStep[])[];
}

export interface Program {
  readonly rowStep: number;
  readonly allocators: readonly AllocatorPlan[];
}

const sizeArb = fc.constantFrom<SizeSpec>('remaining-1', 'remaining', 'remaining+1', 'step', '2step+3', 'beyond-maxStep', 'one');
const callArb: fc.Arbitrary<Call> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({ op: 'next' as const }) },
  { weight: 2, arbitrary: fc.constant({ op: 'now' as const }) },
  { weight: 5, arbitrary: sizeArb.map((size) => ({ op: 'batch' as const, size })) },
  { weight: 1, arbitrary: fc.constant({ op: 'stats' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'close' as const }) },
);
const gapArb = fc.constantFrom<Gap>(0, 0, 0, 1, 2, 3, 'scheduled');

export function programArb(o: {
  rowSteps: readonly number[];
  maxSteps: readonly number[];
  maxAllocators: number;
  maxCallers: number;
  maxCalls: number;
}): fc.Arbitrary<Program> {
  const plan = fc
    .record({
      minStep: fc.constantFrom(1, 3),
      maxStep: fc.constantFrom(...o.maxSteps),
      callers: fc.array(fc.array(fc.record({ call: callArb, gap: gapArb }), { minLength: 1, maxLength: o.maxCalls }), {
        minLength: 1,
        maxLength: o.maxCallers,
      }),
    })
    .map((p) => ({ ...p, minStep: Math.min(p.minStep, p.maxStep) }));
  return fc.record({ rowStep: fc.constantFrom(...o.rowSteps), allocators: fc.array(plan, { minLength: 1, maxLength: o.maxAllocators }) });
}

/** The size a spec means for this allocator now; always 1..cap. */
export function batchSize(spec: SizeSpec, a: SegmentAllocator, plan: AllocatorPlan, rowStep: number, cap: number): number {
  const remaining = Number(a.stats().remaining);
  const step = Math.min(plan.maxStep, Math.max(plan.minStep, a.stats().currentStep || rowStep));
  const n = {
    'remaining-1': remaining - 1,
    remaining,
    'remaining+1': remaining + 1,
    step,
    '2step+3': 2 * step + 3,
    'beyond-maxStep': plan.maxStep + 7,
    one: 1,
  }[spec];
  return Math.max(1, Math.min(cap, n));
}

export interface CallRecord {
  readonly allocator: number;
  /** Global order in which calls were made (synchronously, before any of them settled). */
  readonly order: number;
  readonly op: Call['op'];
  readonly n: number;
  settled: boolean;
  ids: bigint[] | undefined;
  error: unknown;
}

export interface RunHooks {
  /** A new allocator for plan `i`; `onEvent` must be passed through. */
  make(i: number, plan: AllocatorPlan, onEvent: (e: SegmentEvent) => void): SegmentAllocator;
  /** What a 'scheduled' gap awaits (the scheduler's release, or a timer against a real database). */
  pause(): Promise<void>;
  /** Cap on batch sizes (stays below maxBatch and keeps real-database runs short). */
  cap: number;
}

export interface RunState {
  readonly allocators: SegmentAllocator[];
  readonly records: CallRecord[];
  readonly leased: Array<Array<{ start: bigint; end: bigint }>>;
  readonly closeCalled: boolean[];
  /** Resolves when every caller has finished its script. */
  readonly done: Promise<void>;
}

/** Start every caller of every allocator at once; callers await bare unless their step says otherwise. */
export function startProgram(program: Program, hooks: RunHooks): RunState {
  let order = 0;
  const records: CallRecord[] = [];
  const leased: RunState['leased'] = program.allocators.map(() => []);
  const closeCalled = program.allocators.map(() => false);
  const allocators = program.allocators.map((plan, i) =>
    hooks.make(i, plan, (e) => {
      if (e.type === 'lease') leased[i]!.push({ start: e.start, end: e.end });
    }),
  );
  const callers: Promise<void>[] = [];
  program.allocators.forEach((plan, i) => {
    const a = allocators[i]!;
    for (const steps of plan.callers) {
      callers.push(
        (async () => {
          for (const { call, gap } of steps) {
            const rec: CallRecord = { allocator: i, order: order++, op: call.op, n: 0, settled: false, ids: undefined, error: undefined };
            records.push(rec);
            try {
              if (call.op === 'next') rec.ids = [await a.next()];
              // As serve's Leaf route calls it: from memory at once, else the promise.
              else if (call.op === 'now') rec.ids = [a.nextInMemory() ?? (await a.next())];
              else if (call.op === 'batch') {
                const n = batchSize(call.size, a, plan, program.rowStep, hooks.cap);
                (rec as { n: number }).n = n;
                rec.ids = await a.nextBatch(n);
              } else if (call.op === 'stats') a.stats();
              else {
                closeCalled[i] = true;
                await a.close();
              }
            } catch (err) {
              rec.error = err;
            }
            rec.settled = true;
            if (gap === 'scheduled') await hooks.pause();
            else for (let t = 0; t < gap; t++) await null;
          }
        })(),
      );
    }
  });
  return { allocators, records, leased, closeCalled, done: Promise.all(callers).then(() => undefined) };
}

/**
 * What every program must show: every call answered; only CLOSED errors, and only for calls
 * racing or following close(); IDs unique across allocators, strictly increasing per
 * allocator in call order, inside that allocator's leases; and for allocators never closed,
 * every leased ID either handed out or still in memory (none lost).
 */
export function checkProgram(state: RunState): void {
  const pending = state.records.filter((r) => !r.settled);
  expect(
    pending.map((r) => `${r.op}(${r.n}) on allocator ${r.allocator}`),
    'calls never answered',
  ).toEqual([]);
  const seen = new Set<bigint>();
  for (const r of state.records) {
    if (r.error !== undefined) {
      expect(isIdleaseError(r.error, 'CLOSED') ? 'CLOSED' : r.error, `${r.op}(${r.n}) on allocator ${r.allocator}`).toBe('CLOSED');
      expect(state.closeCalled[r.allocator], 'CLOSED without close()').toBe(true);
      continue;
    }
    if (r.op === 'batch') expect(r.ids!.length).toBe(r.n);
    for (const id of r.ids ?? []) {
      expect(seen.has(id), `ID ${id} handed out twice`).toBe(false);
      seen.add(id);
    }
  }
  state.allocators.forEach((a, i) => {
    const ids = state.records
      .filter((r) => r.allocator === i && r.ids)
      .sort((x, y) => x.order - y.order)
      .flatMap((r) => r.ids!);
    for (let k = 1; k < ids.length; k++) expect(ids[k]! > ids[k - 1]!, `allocator ${i}: ${ids[k]} after ${ids[k - 1]}`).toBe(true);
    const ranges = state.leased[i]!;
    for (const id of ids)
      expect(
        ranges.some((g) => id >= g.start && id <= g.end),
        `ID ${id} outside allocator ${i}'s leases`,
      ).toBe(true);
    if (!state.closeCalled[i]) {
      const leasedCount = ranges.reduce((sum, g) => sum + (g.end - g.start + 1n), 0n);
      expect(BigInt(ids.length) + a.stats().remaining, `allocator ${i}: leased IDs neither handed out nor in memory`).toBe(leasedCount);
    }
  });
}
