import { describe, expect, it } from 'vitest';
import { decodeId } from '../../src/layout/index.js';
import { toBigInt } from '../../src/ids.js';
import { createSegmentAllocator } from '../../src/segment/index.js';
import { ERROR_CATEGORIES } from '../../src/errors.js';
import { MemoryStore } from './segment-memory-store.js';

// 383000482429295994 as a JS number: what Drizzle's mode: 'number' or setTypeParser(20, parseInt) hand over.
const ROUNDED = Number('383000482429295994');

const namesTheFix = expect.objectContaining({
  code: 'UNSAFE_NUMBER',
  message: expect.stringMatching(/mode: 'bigint'.*setTypeParser\(20, BigInt\).*supportBigNumbers: true.*bigNumberStrings: true/s),
});

describe('an ID that arrives as a JS number past 2^53 is refused with UNSAFE_NUMBER naming the fix', () => {
  it('the rounding is real: the number is not the ID', () => {
    expect(BigInt(ROUNDED)).toBe(383000482429296000n);
  });

  it('decodeId', () => {
    expect(() => decodeId(ROUNDED as unknown as bigint)).toThrow(namesTheFix);
    expect(() => decodeId((2 ** 53) as unknown as bigint)).toThrow(namesTheFix);
    // A safe number is still not an ID type (they pass 2^53 within days), but it has lost nothing.
    expect(() => decodeId(12345 as unknown as bigint)).toThrow(expect.objectContaining({ code: 'BAD_ARGUMENT' }));
    expect(decodeId('383000482429295994').id).toBe(383000482429295994n);
  });

  it('values read from a database (toBigInt) and IDs given as options', async () => {
    expect(() => toBigInt(ROUNDED, 'max_id')).toThrow(namesTheFix);
    expect(toBigInt(2 ** 53 - 1, 'max_id')).toBe(2n ** 53n - 1n);
    expect(() => toBigInt(1.5, 'max_id')).toThrow(expect.objectContaining({ code: 'INVARIANT' }));
    expect(() => createSegmentAllocator({ store: new MemoryStore(), tag: 'a', create: { start: ROUNDED } })).toThrow(namesTheFix);
  });

  it('a store that answers a rounded number stops the allocator at once (not retried as a database outage)', async () => {
    const store = new MemoryStore();
    await store.create('t', 0n, 10);
    const leaky = {
      ...store,
      read: (tag: string) => store.read(tag),
      create: store.create.bind(store),
      giveBack: store.giveBack.bind(store),
      lease: async () => {
        toBigInt(ROUNDED, 'max_id');
        throw new Error('unreachable');
      },
    };
    const a = createSegmentAllocator({ store: leaky, tag: 't', waitTimeoutMs: 10_000 });
    const t0 = Date.now();
    await expect(a.next()).rejects.toThrow(namesTheFix);
    expect(Date.now() - t0).toBeLessThan(2_000);
    await a.close();
  });

  it('is a setup error: CLI exit 2, like BAD_CONFIG', () => {
    expect(ERROR_CATEGORIES.UNSAFE_NUMBER).toBe('config');
  });
});
