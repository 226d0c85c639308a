/**
 * What `idlease serve` issues IDs from: the served tags' segment allocators (tags.ts), each
 * tag's Redis sequence (made at its first /api/redis or /v1/redis request), and one snowflake
 * allocator (made at the first /api/snowflake request). One close() ends them all.
 */
import type { Registry } from 'prom-client';
import type { KnexLike } from '../drivers/knex.js';
import { collectMetrics } from '../metrics/collect.js';
import { createRedisSequence } from '../redis-sequence/sequence.js';
import type { RedisSequence } from '../redis-sequence/types.js';
import { createSnowflakeAllocator } from '../snowflake/allocator.js';
import type { SnowflakeAllocator } from '../snowflake/types.js';
import { HttpError } from './http-errors.js';
import { ServedTags } from './tags.js';

export interface ServeAllocatorsOptions {
  readonly knex: KnexLike;
  readonly tags?: readonly string[];
  readonly table?: string;
  readonly schema?: string;
  readonly maxStep?: number;
  readonly snowflakeGroup?: string;
  readonly redis?: unknown;
  readonly adminCommand?: string;
  /** Tags created over HTTP stop at this many tags served. */
  readonly maxTags?: number;
  readonly registry: Registry;
}

export class ServeAllocators {
  readonly tags: ServedTags;
  readonly sequences = new Map<string, RedisSequence>();
  // Created at the first snowflake request, so a server without idlease_workers still serves segments.
  private snowflake: Promise<SnowflakeAllocator> | undefined;
  /** The snowflake allocator once its first claim succeeded (the status page reads its stats). */
  snowflakeAllocator: SnowflakeAllocator | undefined;

  constructor(private readonly o: ServeAllocatorsOptions) {
    this.tags = new ServedTags({
      knex: o.knex,
      tags: o.tags,
      table: o.table,
      schema: o.schema,
      maxStep: o.maxStep,
      registry: o.registry,
      ...(o.maxTags === undefined ? {} : { maxTags: o.maxTags }),
      ...(o.adminCommand === undefined ? {} : { adminCommand: o.adminCommand }),
    });
  }

  /** The Redis sequence of a served tag, made on its first request. */
  async sequenceFor(tag: string): Promise<RedisSequence> {
    let s = this.sequences.get(tag);
    if (s) return s;
    if (this.o.redis === undefined)
      throw new HttpError(
        404,
        'NOT_FOUND',
        'This server has no Redis: start it with --redis-url redis://… to serve /api/redis and /v1/redis.',
      );
    await this.tags.allocatorFor(tag); // only served tags
    s = this.sequences.get(tag);
    if (s) return s;
    s = createRedisSequence({
      redis: this.o.redis,
      knex: this.o.knex,
      tag,
      table: this.o.table,
      schema: this.o.schema,
      ...(this.o.maxStep === undefined ? {} : { maxStep: this.o.maxStep }),
    });
    this.sequences.set(tag, s);
    collectMetrics(this.o.registry, s);
    return s;
  }

  /**
   * The next snowflake ID. The first call claims the worker id, and the ID that claim draws is
   * this request's answer (it was once drawn and thrown away, yet counted as issued): a missing
   * table or no free id is reported to this request, and the next request tries afresh.
   */
  nextSnowflake(): Promise<bigint> {
    if (this.snowflake) return this.snowflake.then((a) => a.next());
    const a = createSnowflakeAllocator({
      knex: this.o.knex,
      group: this.o.snowflakeGroup ?? 'serve',
      ...(this.o.schema === undefined ? {} : { schema: this.o.schema }),
    });
    const first = a.next();
    this.snowflake = first.then(
      () => {
        collectMetrics(this.o.registry, a);
        this.snowflakeAllocator = a;
        return a;
      },
      async (err: unknown) => {
        this.snowflake = undefined;
        await a.close().catch(() => undefined);
        throw err;
      },
    );
    return this.snowflake.then(() => first);
  }

  /** Close every allocator (each segment allocator gives its unused tail back). */
  async close(): Promise<void> {
    this.tags.closing = true;
    const sf = this.snowflake?.catch(() => undefined);
    await Promise.all(
      [...this.tags.allocators.values(), ...this.sequences.values()].map((a) => a.close()).concat(sf ? [sf.then((a) => a?.close())] : []),
    );
  }
}
