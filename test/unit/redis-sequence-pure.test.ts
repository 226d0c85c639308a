/**
 * The Redis sequence's pure parts: windows, script replies read exactly (BigInt, never Lua
 * doubles), the regression rule, and option checks. No Redis and no database: a node-redis client
 * that is created but never connected is enough to pass the client check.
 */
import { createClient, createCluster, createSentinel } from 'redis';
import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { isRegression, parseInstallReply, parseNextReply, windowOf } from '../../src/redis-sequence/window.js';
import { resolveRedisSequenceOptions } from '../../src/redis-sequence/options.js';
import { redisCommander } from '../../src/redis-sequence/client.js';
import { MAX_INT64 } from '../../src/ids.js';
import type { SegmentStore } from '../../src/segment/store.js';
import { MemoryStore } from './segment-memory-store.js';

describe('windows', () => {
  it('a lease ending at `end` with step `size` owns (end − size, end]', () => {
    expect(windowOf(1000n, 100, 't')).toEqual({ base: 900n, size: 100, end: 1000n });
    expect(windowOf(MAX_INT64, 5, 't').base).toBe(MAX_INT64 - 5n);
  });

  it('a window outside 1 … 2^63−1 is refused', () => {
    expect(() => windowOf(50n, 100, 't')).toThrow(expect.objectContaining({ code: 'INVARIANT' }));
    expect(() => windowOf(MAX_INT64 + 1n, 1, 't')).toThrow(expect.objectContaining({ code: 'INVARIANT' }));
  });

  it('regression: a window straddling the key high-water mark, or a row below it', () => {
    const hi = 1000n;
    expect(isRegression({ base: 950n, size: 100, end: 1050n }, hi, 1050n)).toBe(true);
    expect(isRegression({ base: 800n, size: 100, end: 900n }, hi, 1200n)).toBe(false); // an earlier window that lost the race
    expect(isRegression({ base: 800n, size: 100, end: 900n }, hi, 900n)).toBe(true); // the row forgot what Redis used
  });
});

describe('script replies', () => {
  it('IDs are computed exactly from decimal bases, across two windows', () => {
    const base = String(MAX_INT64 - 10n);
    // Window (max−10, max−3]: offsets 5..7 issued; then window (max−3, max]: offsets 0..1.
    const r = parseNextReply(['ok', '7', '', '42', base, '4', '3', String(MAX_INT64 - 3n), '0', '2']);
    expect(r).toEqual({
      kind: 'ok',
      left: 7,
      elected: undefined,
      count: 42,
      ids: [MAX_INT64 - 5n, MAX_INT64 - 4n, MAX_INT64 - 3n, MAX_INT64 - 2n, MAX_INT64 - 1n],
    });
  });

  it('values past 2^53 keep every digit', () => {
    const r = parseNextReply(['ok', '0', 'abc/def', '1', '9007199254740993', '0', '1']);
    expect(r).toEqual({ kind: 'ok', left: 0, elected: 'abc/def', count: 1, ids: [9007199254740994n] });
  });

  it('stale, foreign, and install answers; a low answer carries the highest ID issued', () => {
    expect(parseNextReply(['stale', 'id'])).toEqual({ kind: 'stale', identity: 'id' });
    expect(parseNextReply(['foreign', 'inst/idlease.t/order'])).toEqual({ kind: 'foreign', owner: 'inst/idlease.t/order' });
    expect(parseInstallReply(['queued'])).toEqual({ kind: 'queued' });
    expect(parseInstallReply(['low', '12345678901234567890'.slice(0, 19), '1234567890123456000', '7'])).toEqual({
      kind: 'low',
      hi: 1234567890123456789n,
      top: 1234567890123456007n,
    });
  });

  it.each([
    [['ok']],
    [['ok', '1', '', '0', '12', '0']],
    [['ok', '1', '', '0', '1e5', '0', '1']],
    [['ok', '1', '', '0', String(MAX_INT64), '0', '1']],
    [['ok', '-1', '', '0']],
    [['ok', '1', '', '-3']],
    [['what']],
  ])('a reply the script cannot give is refused: %j', (reply) => {
    expect(() => parseNextReply(reply)).toThrow(expect.objectContaining({ code: 'INVARIANT' }));
  });
});

describe('options', () => {
  const redis = createClient();
  const store: SegmentStore = new MemoryStore();

  it('defaults', () => {
    const o = resolveRedisSequenceOptions({ redis, store, tag: 'order', owner: 'mine' });
    expect(o).toMatchObject({
      key: 'idlease:seq:{order}',
      commandTimeoutMs: 1000,
      claimTimeoutMs: 2_000,
      targetLeaseMs: 10_000,
      waitTimeoutMs: 5000,
    });
    expect(o.redis.kind).toBe('node-redis');
  });

  it('ioredis is told apart by shape', () => {
    const io = new Redis({ lazyConnect: true });
    expect(redisCommander(io).kind).toBe('ioredis');
    io.disconnect();
  });

  it('Sentinel clients of both libraries get their adapter: ioredis { sentinels, name }, node-redis createSentinel()', () => {
    const io = new Redis({ sentinels: [{ host: '127.0.0.1', port: 1 }], name: 'm', lazyConnect: true });
    expect(redisCommander(io).kind).toBe('ioredis');
    io.disconnect();
    const s = createSentinel({ name: 'm', sentinelRootNodes: [{ host: '127.0.0.1', port: 1 }] });
    expect(redisCommander(s).kind).toBe('node-redis-sentinel');
  });

  it('cluster clients of both libraries get their adapter: ioredis Cluster, node-redis createCluster(); the key is hash-tagged by the tag', () => {
    const io = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
    const nr = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:1' }] });
    expect(redisCommander(io).kind).toBe('ioredis-cluster');
    expect(redisCommander(nr).kind).toBe('node-redis-cluster');
    for (const c of [io, nr]) expect(resolveRedisSequenceOptions({ redis: c, store, tag: 'x', owner: 'o' }).key).toBe('idlease:seq:{x}');
    io.disconnect();
  });

  it.each([
    [{ tag: 'x', store }, /needs `redis`/],
    [{ redis: {}, tag: 'x', store }, /redis must be/],
    [{ redis, tag: 'x' }, /exactly one of `knex`/],
    [{ redis, tag: 'x', store, commandTimeoutMs: 0 }, /commandTimeoutMs must be an integer/],
    [{ redis, tag: 'x', store, maxStep: 0 }, /maxStep/],
    [{ redis, tag: 'x', store, keyPrefix: 5 }, /keyPrefix/],
    [{ redis, tag: 'x', store, onEvent: 1 }, /onEvent/],
    [{ redis, tag: 'x', store, redisUrl: 'redis://' }, /unknown option "redisUrl"/],
    [{ redis, tag: 7, store }, /tag must be/],
    [{ redis, tag: 'x', store }, /with `store` needs `owner`/],
    [{ redis, tag: 'x', store, owner: '' }, /owner must be/],
  ])('refused with BAD_CONFIG: %#', (options, message) => {
    expect(() => resolveRedisSequenceOptions(options as never)).toThrow(
      expect.objectContaining({ code: 'BAD_CONFIG', message: expect.stringMatching(message) }),
    );
  });

  it('a string that is no tag (empty, 129 characters) is BAD_ARGUMENT, as every tag error is', () => {
    for (const tag of ['', 'x'.repeat(129)])
      expect(() => resolveRedisSequenceOptions({ redis, tag, store } as never)).toThrow(
        expect.objectContaining({ code: 'BAD_ARGUMENT', message: expect.stringMatching(/must be 1 to 128 characters long/) }),
      );
  });
});
