/**
 * Prometheus metrics for allocators, on prom-client: the generic part. Each allocator kind keeps
 * its families in one table of rows `[name, help, read]` (./segment.ts, ./ticket.ts,
 * ./snowflake.ts, ./redis.ts), picked by the `kind` its stats() carry; ./table.ts turns rows into
 * instruments read from stats() at each scrape. The few things a snapshot cannot hold (lease
 * latency, errors by code, when the last error happened) come from events — which only slow
 * paths emit, so metrics cost `next()` nothing. Every series an allocator has exists from the
 * moment it is added, at zero: an alert's `rate()`/`increase()` needs a sample before the first
 * event, and a dashboard shows a quiet tag rather than no tag.
 */
import type { Registry } from 'prom-client';
import { IdleaseError } from '../errors.js';
import type { RedisSequence } from '../redis-sequence/types.js';
import type { SegmentAllocator } from '../segment/types.js';
import type { SnowflakeAllocator } from '../snowflake/types.js';
import type { TicketAllocator } from '../ticket/types.js';
import { redisMetrics } from './redis.js';
import { segmentMetrics, type SegmentInstruments } from './segment.js';
import { snowflakeMetrics } from './snowflake.js';
import { registerTable, type KindMetrics } from './table.js';
import { ticketMetrics } from './ticket.js';

export type Observable = SegmentAllocator | TicketAllocator | SnowflakeAllocator | RedisSequence;

type Kind = ReturnType<Observable['stats']>['kind'];

/** Every allocator kind's metrics, by the `kind` its stats() carry: a new kind is one file and one line here. */
const KINDS: Record<Kind, KindMetrics<never, unknown>> = {
  segment: segmentMetrics,
  ticket: ticketMetrics,
  snowflake: snowflakeMetrics,
  redis: redisMetrics,
};

/** One kind on one registry: its instruments and the allocators its tables read. */
interface Registered {
  readonly metrics: KindMetrics<Observable, unknown>;
  readonly instruments: unknown;
  readonly members: Set<Observable>;
}

const states = new WeakMap<Registry, ReadonlyMap<string, Registered>>();

/** Every kind's families on `registry`, made once (a registry refuses a name twice). */
function register(registry: Registry): ReadonlyMap<string, Registered> {
  const kinds = new Map<string, Registered>();
  for (const [kind, metrics] of Object.entries(KINDS) as Array<[Kind, KindMetrics<Observable, unknown>]>) {
    const instruments = metrics.instruments(registry);
    const members = new Set<Observable>();
    for (const t of metrics.tables(instruments)) registerTable(registry, t, members);
    kinds.set(kind, { metrics, instruments, members });
  }
  states.set(registry, kinds);
  return kinds;
}

function stateOf(registry: Registry): ReadonlyMap<string, Registered> {
  if (!registry || typeof (registry as Registry).registerMetric !== 'function') {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      "collectMetrics(registry, …): registry must be a prom-client Registry (import { register } from 'prom-client').",
    );
  }
  return states.get(registry) ?? register(registry);
}

/** The kind an allocator's stats() say it is; undefined for anything else. */
function kindOf(a: unknown): string | undefined {
  if (typeof (a as Observable | undefined)?.stats !== 'function') return undefined;
  const kind = (a as Observable).stats()?.kind;
  return typeof kind === 'string' ? kind : undefined;
}

/**
 * Count ranges handed to remote clients (idlease serve's lease route): they are served from
 * the client's memory, so no allocator here sees them. `count(tag, 0)` makes a tag's series
 * exist before its first lease.
 */
export function remoteLeaseCounter(registry: Registry): (tag: string, ids: number) => void {
  const segment = stateOf(registry).get('segment')!.instruments as SegmentInstruments;
  return (tag, ids) => {
    segment.remoteLeases.inc({ tag }, ids > 0 ? 1 : 0);
    segment.remoteLeaseIds.inc({ tag }, ids);
  };
}

/**
 * Export the allocators' metrics on `registry` (prom-client's `register` or your own).
 * Call again to add more allocators; the returned function stops exporting these ones.
 */
export function collectMetrics(registry: Registry, ...allocators: Observable[]): () => void {
  const kinds = stateOf(registry);
  const stops: Array<() => void> = [];
  for (const a of allocators) {
    const kind = kinds.get(kindOf(a) ?? '');
    if (kind === undefined) {
      throw new IdleaseError(
        'BAD_ARGUMENT',
        'collectMetrics(registry, ...allocators): each allocator must come from createSegmentAllocator, createTicketAllocator, createSnowflakeAllocator or createRedisSequence.',
      );
    }
    kind.members.add(a);
    stops.push(kind.metrics.watch(a, kind.instruments), () => kind.members.delete(a));
  }
  return () => {
    for (const stop of stops) stop();
  };
}
