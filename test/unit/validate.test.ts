import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { exactlyOne, intOption, rejectUnknownKeys } from '../../src/validate.js';
import { Emitter } from '../../src/runtime/events.js';
import { ERROR_CATEGORIES, IdleaseError, isFatalCode, isRetryable, type IdleaseErrorCode } from '../../src/errors.js';
import { SEGMENT_LEASE_RETRIED } from '../../src/segment/types.js';
import { createTicketAllocator } from '../../src/ticket/allocator.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { resolveSegmentOptions } from '../../src/segment/options.js';

const thrown = (fn: () => unknown): IdleaseError | undefined => {
  try {
    fn();
    return undefined;
  } catch (e) {
    if (!(e instanceof IdleaseError)) throw e;
    return e;
  }
};

const range = fc
  .tuple(fc.integer({ min: -1_000_000, max: 1_000_000 }), fc.integer({ min: 0, max: 1_000_000 }))
  .map(([min, width]) => ({ min, max: min + width }));

describe('intOption', () => {
  it('returns an integer inside [min, max] unchanged', () => {
    fc.assert(
      fc.property(
        range.chain((r) => fc.tuple(fc.constant(r), fc.integer({ min: r.min, max: r.max }))),
        ([r, v]) => {
          expect(intOption(v, 'someOption', r)).toBe(v);
        },
      ),
    );
  });

  it('refuses anything outside [min, max] or not an integer with BAD_CONFIG naming the option and an example', () => {
    const outside = range.chain((r) =>
      fc.tuple(
        fc.constant(r),
        fc.oneof(
          fc.integer({ max: r.min - 1 }),
          fc.integer({ min: r.max + 1 }),
          fc.double({ noInteger: true }),
          fc.constantFrom(Number.NaN, Infinity, -Infinity, null, undefined),
          fc.string(),
          fc.boolean(),
          fc.bigInt(),
          fc.object(),
          // Found by this property: a message built with String(value) threw a TypeError here.
          fc.constant(Object.create(null) as object),
          fc.constant({ toString: 'not a function' }),
        ),
      ),
    );
    fc.assert(
      fc.property(outside, ([r, v]) => {
        const err = thrown(() => intOption(v, 'someOption', r));
        expect(err?.code).toBe('BAD_CONFIG');
        expect(err?.message).toMatch(/^someOption must be an integer /);
        expect(err?.message).toContain(`Example: someOption: ${r.min}.`);
      }),
    );
  });

  it('uses the default for undefined and null, and shows it as the example', () => {
    expect(intOption(undefined, 'n', { min: 1, max: 10, default: 7 })).toBe(7);
    expect(intOption(null, 'n', { min: 1, max: 10, default: 7 })).toBe(7);
    expect(thrown(() => intOption(11, 'n', { min: 1, max: 10, default: 7, unit: 'milliseconds' }))?.message).toBe(
      'n must be an integer from 1 to 10 (milliseconds), got 11. Example: n: 7.',
    );
  });
});

describe('rejectUnknownKeys', () => {
  it('refuses the first unknown key with BAD_CONFIG naming the known ones', () => {
    rejectUnknownKeys({ a: 1, b: undefined }, ['a', 'b'], 'f');
    const err = thrown(() => rejectUnknownKeys({ a: 1, c: 2 }, ['a', 'b'], 'f'));
    expect(err?.code).toBe('BAD_CONFIG');
    expect(err?.message).toBe('f: unknown option "c". Known options: a, b.');
  });
});

describe('every allocator refuses an unknown option', () => {
  it('segment', () => {
    const err = thrown(() => resolveSegmentOptions({ store: {} as never, tag: 'order', maxStpe: 5 } as never));
    expect(err?.code).toBe('BAD_CONFIG');
    expect(err?.message).toMatch(/createSegmentAllocator: unknown option "maxStpe"\. Known options: .*maxStep/);
  });

  it('ticket', () => {
    const err = thrown(() => createTicketAllocator({ servers: [{ knex: {} as never, offset: 1 }], timeoutMS: 10 } as never));
    expect(err?.code).toBe('BAD_CONFIG');
    expect(err?.message).toMatch(/createTicketAllocator: unknown option "timeoutMS"\. Known options: .*timeoutMs/);
  });

  it('snowflake', () => {
    const err = thrown(() => createSnowflakeAllocator({ store: {} as never, leaseTTLMs: 10 } as never));
    expect(err?.code).toBe('BAD_CONFIG');
    expect(err?.message).toMatch(/createSnowflakeAllocator: unknown option "leaseTTLMs"\. Known options: .*leaseTtlMs/);
  });
});

describe('retryable, read from ERROR_CATEGORIES', () => {
  const fatal = (retried: readonly IdleaseErrorCode[]) =>
    (Object.keys(ERROR_CATEGORIES) as IdleaseErrorCode[]).filter((c) => isFatalCode(c, retried)).sort();

  it('stops the segment lease loop on exactly the codes it always stopped on', () => {
    expect(fatal(SEGMENT_LEASE_RETRIED)).toEqual(['BAD_CONFIG', 'EXHAUSTED', 'INVARIANT', 'NOT_MIGRATED', 'UNKNOWN_TAG', 'UNSAFE_NUMBER']);
  });

  it('retries plain errors, unavailable codes and unknown codes', () => {
    expect(isRetryable(new Error('ECONNRESET'))).toBe(true);
    expect(isRetryable(new IdleaseError('DB_UNAVAILABLE', 'x'))).toBe(true);
    expect(isRetryable(new IdleaseError('BAD_CONFIG', 'x'))).toBe(false);
    expect(isFatalCode('57014')).toBe(false);
    expect(isFatalCode('toString')).toBe(false);
  });
});

describe('the checks every mechanism shares live once', () => {
  it('exactlyOne: the one key given, BAD_CONFIG naming how many for none or two', () => {
    const needs = 'f needs exactly one of `knex`, `pool` or `store`';
    expect(exactlyOne({ pool: {} }, ['knex', 'pool', 'store'], needs)).toBe('pool');
    expect(thrown(() => exactlyOne({}, ['knex', 'pool', 'store'], needs))).toMatchObject({
      code: 'BAD_CONFIG',
      message: `${needs}; got 0.`,
    });
    expect(thrown(() => exactlyOne({ knex: {}, store: {} }, ['knex', 'pool', 'store'], needs))).toMatchObject({
      code: 'BAD_CONFIG',
      message: `${needs}; got 2.`,
    });
  });

  it('onEvent(listener) refuses a listener that is not a function with BAD_ARGUMENT, for every mechanism (the snowflake allocator took one)', () => {
    const events = new Emitter<unknown>();
    expect(thrown(() => events.add('log' as never))).toMatchObject({ code: 'BAD_ARGUMENT' });
    const snowflake = createSnowflakeAllocator({ store: { claim: () => Promise.resolve(undefined) } as never });
    expect(thrown(() => snowflake.onEvent(42 as never))).toMatchObject({ code: 'BAD_ARGUMENT' });
    void snowflake.close();
  });
});
