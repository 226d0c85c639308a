/**
 * Prometheus metrics for allocators, on prom-client. Values are read from each allocator's
 * stats() when the registry is scraped, and the few things a snapshot cannot hold (lease
 * latency, errors by code, when the last error happened) come from its events — which only
 * slow paths emit, so metrics cost `next()` nothing. Every series an allocator has exists
 * from the moment it is added, at zero: an alert's `rate()`/`increase()` needs a sample
 * before the first event, and a dashboard shows a quiet tag rather than no tag.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { IdleaseError, isIdleaseError } from '../errors.js';
import type { SegmentAllocator, SegmentEvent } from '../segment/types.js';
import type { SnowflakeAllocator, SnowflakeEvent, SnowflakeStats } from '../snowflake/types.js';
import type { TicketAllocator } from '../ticket/types.js';
import type { RedisSequence, RedisSequenceStats } from '../redis-sequence/types.js';

export type Observable = SegmentAllocator | TicketAllocator | SnowflakeAllocator | RedisSequence;

interface RegistryState {
  readonly segments: Set<SegmentAllocator>;
  readonly tickets: Set<TicketAllocator>;
  readonly snowflakes: Set<SnowflakeAllocator>;
  readonly redisSequences: Set<RedisSequence>;
  readonly leaseSeconds: Histogram<'tag'>;
  readonly leaseErrors: Counter<'tag' | 'code'>;
  readonly segmentErrorAt: Map<string, number>;
  readonly renewalSeconds: Histogram<'group'>;
  readonly remoteLeases: Counter<'tag'>;
  readonly remoteLeaseIds: Counter<'tag'>;
  /** Histogram series already created: zero() on one that exists would wipe its counts. */
  readonly started: Set<string>;
}

const states = new WeakMap<Registry, RegistryState>();

// A snowflake allocator has nextBatch too: it is told apart by its group and layout.
function isSnowflake(a: Observable): a is SnowflakeAllocator {
  return (
    typeof (a as SnowflakeAllocator).group === 'string' &&
    typeof (a as SnowflakeAllocator).layout === 'object' &&
    typeof a.stats === 'function'
  );
}

// A Redis sequence has a tag and nextBatch like a segment allocator: told apart by its stats.
function isRedisSequence(a: Observable): a is RedisSequence {
  return typeof a.stats === 'function' && typeof (a.stats() as Partial<RedisSequenceStats>).reseeds === 'number';
}

function isSegment(a: Observable): a is SegmentAllocator {
  return (
    typeof (a as SegmentAllocator).tag === 'string' &&
    typeof (a as SegmentAllocator).nextBatch === 'function' &&
    typeof a.stats === 'function'
  );
}

function isTicket(a: Observable): a is TicketAllocator {
  return typeof (a as TicketAllocator).status === 'function' && typeof a.stats === 'function';
}

/** A counter whose value is a running total kept elsewhere (a stats() field). */
function total<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly L[],
  read: (set: (labels: Record<L, string>, v: number) => void) => void,
): void {
  new Counter<L>({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      read((labels, v) => this.inc(labels, v));
    },
  });
}

/**
 * A gauge read from stats(). Allocators sharing a tag (or a server name, a group) add up, or
 * with `highest` the largest wins: a worker id or a lead summed over allocators means nothing.
 */
function gauge<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: readonly L[],
  read: (set: (labels: Record<L, string>, v: number) => void) => void,
  combine: 'sum' | 'highest' = 'sum',
): void {
  new Gauge<L>({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      if (combine === 'sum') {
        read((labels, v) => this.inc(labels, v));
        return;
      }
      const top = new Map<string, { labels: Record<L, string>; v: number }>();
      read((labels, v) => {
        const key = JSON.stringify(labels);
        const seen = top.get(key);
        if (seen === undefined || v > seen.v) top.set(key, { labels, v });
      });
      for (const { labels, v } of top.values()) this.set(labels, v);
    },
  });
}

/** Reads one stats() value of every allocator in `allocators`, labelled `key` = labelOf(stats). */
function perAllocator<S, K extends string>(allocators: ReadonlySet<{ stats(): S }>, key: K, labelOf: (s: S) => string) {
  return (f: (s: S) => number) => (set: (labels: Record<K, string>, v: number) => void) => {
    for (const a of allocators) {
      const s = a.stats();
      set({ [key]: labelOf(s) } as Record<K, string>, f(s));
    }
  };
}

function register(registry: Registry): RegistryState {
  const segments = new Set<SegmentAllocator>();
  const tickets = new Set<TicketAllocator>();
  const segmentErrorAt = new Map<string, number>();
  const perSegment = perAllocator(segments, 'tag', (s) => s.tag);
  total(
    registry,
    'idlease_segment_ids_served_total',
    'IDs handed out by segment allocators.',
    ['tag'],
    perSegment((s) => s.served),
  );
  total(
    registry,
    'idlease_segment_leases_total',
    'Successful segment leases (database round trips that moved max_id).',
    ['tag'],
    perSegment((s) => s.leases),
  );
  total(
    registry,
    'idlease_segment_waits_total',
    'Calls that found memory empty and waited for a lease.',
    ['tag'],
    perSegment((s) => s.waits),
  );
  total(
    registry,
    'idlease_segment_timeouts_total',
    'Calls that failed with DB_UNAVAILABLE after waitTimeoutMs.',
    ['tag'],
    perSegment((s) => s.timeouts),
  );
  total(
    registry,
    'idlease_segment_regressions_total',
    "Leases refused because the tag's row went backwards (failover, restore).",
    ['tag'],
    perSegment((s) => s.regressions),
  );
  total(
    registry,
    'idlease_segment_failover_jumps_total',
    "Leases that were the first on a new database instance and jumped the tag's row by its failover gap.",
    ['tag'],
    perSegment((s) => s.failoverJumps),
  );
  gauge(
    registry,
    'idlease_segment_remaining_ids',
    'IDs in memory (current segment + preloaded one).',
    ['tag'],
    perSegment((s) => Number(s.remaining)),
  );
  gauge(
    registry,
    'idlease_segment_runway_seconds',
    'How long the IDs in memory last at the measured rate (+Inf before a rate is known).',
    ['tag'],
    perSegment((s) => (s.ratePerSecond ? Number(s.remaining) / s.ratePerSecond : Number.POSITIVE_INFINITY)),
  );
  gauge(
    registry,
    'idlease_segment_step',
    'Size of the last lease.',
    ['tag'],
    perSegment((s) => s.currentStep),
  );
  gauge(
    registry,
    'idlease_segment_rate_ids_per_second',
    'Measured consumption.',
    ['tag'],
    perSegment((s) => s.ratePerSecond ?? 0),
  );
  gauge(registry, 'idlease_segment_last_error_timestamp_seconds', 'When the last lease failed (0: never).', ['tag'], (set) => {
    for (const a of segments) set({ tag: a.tag }, (segmentErrorAt.get(a.tag) ?? 0) / 1000);
  });

  const perServer =
    (f: (s: ReturnType<TicketAllocator['stats']>['servers'][number]) => number) => (set: (l: { server: string }, v: number) => void) => {
      for (const a of tickets) for (const s of a.stats().servers) set({ server: s.name }, f(s));
    };
  total(
    registry,
    'idlease_ticket_ids_served_total',
    'IDs handed out per ticket server.',
    ['server'],
    perServer((s) => s.served),
  );
  total(
    registry,
    'idlease_ticket_server_failures_total',
    'Failed draws and probes per ticket server.',
    ['server'],
    perServer((s) => s.failures),
  );
  total(
    registry,
    'idlease_ticket_lock_conflicts_total',
    'Deadlocks and lock-wait timeouts met and retried per ticket server.',
    ['server'],
    perServer((s) => s.lockConflicts),
  );
  gauge(
    registry,
    'idlease_ticket_server_up',
    '1 when the ticket server is in the rotation, 0 when down or refused.',
    ['server'],
    perServer((s) => (s.health === 'up' ? 1 : 0)),
  );
  gauge(
    registry,
    'idlease_ticket_last_error_timestamp_seconds',
    'When the ticket server last failed (0: never).',
    ['server'],
    perServer((s) => (s.lastErrorAt ?? 0) / 1000),
  );
  total(registry, 'idlease_ticket_timeouts_total', 'Ticket calls that failed with DB_UNAVAILABLE after timeoutMs.', [], (set) => {
    for (const a of tickets) set({}, a.stats().timeouts);
  });

  const snowflakes = new Set<SnowflakeAllocator>();
  const perGroup = perAllocator(snowflakes, 'group', (s: SnowflakeStats) => s.group);
  total(
    registry,
    'idlease_snowflake_ids_issued_total',
    'IDs handed out by snowflake allocators.',
    ['group'],
    perGroup((s) => s.issued),
  );
  total(
    registry,
    'idlease_snowflake_claims_total',
    'Worker ids claimed.',
    ['group'],
    perGroup((s) => s.claims),
  );
  total(
    registry,
    'idlease_snowflake_renewals_total',
    'Worker-id lease renewals confirmed by the database.',
    ['group'],
    perGroup((s) => s.renewals),
  );
  total(
    registry,
    'idlease_snowflake_lease_errors_total',
    'Failed claims and renewals (each is retried).',
    ['group'],
    perGroup((s) => s.leaseErrors),
  );
  total(
    registry,
    'idlease_snowflake_leases_lost_total',
    'Leases found taken by another holder after they ran out (the process was paused or cut off past leaseTtlMs).',
    ['group'],
    perGroup((s) => s.lost),
  );
  total(
    registry,
    'idlease_snowflake_clock_waits_total',
    'Calls that waited because the wall clock was more than maxLeadMs behind the last issued time.',
    ['group'],
    perGroup((s) => s.clockWaits),
  );
  total(
    registry,
    'idlease_snowflake_failover_waits_total',
    'Claims that waited out a lease before issuing: the database instance was not the one the worker table was last settled on (a failover).',
    ['group'],
    perGroup((s) => s.failoverWaits),
  );
  total(
    registry,
    'idlease_snowflake_timeouts_total',
    'Calls that gave up waiting (DB_UNAVAILABLE, NO_WORKER_ID, CLOCK_BACKWARDS).',
    ['group'],
    perGroup((s) => s.timeouts),
  );
  gauge(
    registry,
    'idlease_snowflake_lease_valid',
    'Allocators whose worker-id lease is valid now, so next() issues without waiting (1 per healthy process).',
    ['group'],
    perGroup((s) => (s.fenced ? 1 : 0)),
  );
  gauge(
    registry,
    'idlease_snowflake_worker_id',
    'The worker id held (-1 while none is); with several allocators of one group in a registry, the highest.',
    ['group'],
    perGroup((s) => s.workerId ?? -1),
    'highest',
  );
  gauge(
    registry,
    'idlease_snowflake_lead_seconds',
    'How far the last issued time is ahead of the wall clock (borrowed time, at most maxLeadMs); the largest per group.',
    ['group'],
    perGroup((s) => s.leadMs / 1000),
    'highest',
  );

  const redisSequences = new Set<RedisSequence>();
  const perKey = perAllocator(redisSequences, 'tag', (s: RedisSequenceStats) => s.tag);
  total(
    registry,
    'idlease_redis_ids_served_total',
    'IDs handed out by Redis sequences.',
    ['tag'],
    perKey((s) => s.served),
  );
  total(
    registry,
    'idlease_redis_calls_total',
    'Redis script calls made by Redis sequences.',
    ['tag'],
    perKey((s) => s.calls),
  );
  total(
    registry,
    'idlease_redis_windows_total',
    'Windows leased from the database and installed in Redis.',
    ['tag'],
    perKey((s) => s.windows),
  );
  total(
    registry,
    'idlease_redis_reseeds_total',
    'Keys found written by another Redis incarnation (restart, restore, promotion) or missing, and re-seeded.',
    ['tag'],
    perKey((s) => s.reseeds),
  );
  total(
    registry,
    'idlease_redis_lost_windows_total',
    'Windows leased but not installed (a race or a Redis change): given back or a gap.',
    ['tag'],
    perKey((s) => s.lostWindows),
  );
  total(
    registry,
    'idlease_redis_regressions_total',
    "Windows refused because the tag's row went below what Redis had issued.",
    ['tag'],
    perKey((s) => s.regressions),
  );
  total(
    registry,
    'idlease_redis_errors_total',
    'Failed Redis calls (each retried within waitTimeoutMs).',
    ['tag'],
    perKey((s) => s.redisErrors),
  );
  total(
    registry,
    'idlease_redis_timeouts_total',
    'Calls that failed with REDIS_UNAVAILABLE or DB_UNAVAILABLE after waitTimeoutMs.',
    ['tag'],
    perKey((s) => s.timeouts),
  );
  gauge(
    registry,
    'idlease_redis_left_ids',
    'IDs left in the key (current + prefetched window) at the last call: a gap if Redis is lost now. One key per tag: the largest report.',
    ['tag'],
    perKey((s) => s.left),
    'highest',
  );
  gauge(
    registry,
    'idlease_redis_rate_ids_per_second',
    'Issue rate of the key (all processes), as measured; the largest report.',
    ['tag'],
    perKey((s) => s.ratePerSecond ?? 0),
    'highest',
  );

  const state: RegistryState = {
    segments,
    tickets,
    snowflakes,
    redisSequences,
    segmentErrorAt,
    started: new Set(),
    leaseSeconds: new Histogram({
      name: 'idlease_segment_lease_duration_seconds',
      help: 'Segment lease latency (read + update).',
      labelNames: ['tag'],
      registers: [registry],
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    }),
    leaseErrors: new Counter({
      name: 'idlease_segment_lease_errors_total',
      help: 'Failed lease attempts by error code (each is retried).',
      labelNames: ['tag', 'code'],
      registers: [registry],
    }),
    renewalSeconds: new Histogram({
      name: 'idlease_snowflake_renewal_duration_seconds',
      help: 'Worker-id lease renewal latency.',
      labelNames: ['group'],
      registers: [registry],
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    }),
    remoteLeases: new Counter({
      name: 'idlease_segment_remote_leases_total',
      help: 'Ranges leased to remote clients (idlease serve: POST /v1/segment/{tag}/lease).',
      labelNames: ['tag'],
      registers: [registry],
    }),
    remoteLeaseIds: new Counter({
      name: 'idlease_segment_remote_lease_ids_total',
      help: 'IDs in the ranges leased to remote clients.',
      labelNames: ['tag'],
      registers: [registry],
    }),
  };
  states.set(registry, state);
  return state;
}

/** A histogram's series at zero, made once: zero() on a series that exists would wipe its counts. */
function startOnce<L extends string>(state: RegistryState, histogram: Histogram<L>, labels: Record<L, string>): void {
  const key = JSON.stringify(labels);
  if (state.started.has(key)) return;
  state.started.add(key);
  histogram.zero(labels);
}

function errorCode(err: unknown): string {
  if (isIdleaseError(err)) return err.code;
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' || typeof code === 'number' ? String(code) : 'unknown';
}

function stateOf(registry: Registry): RegistryState {
  if (!registry || typeof (registry as Registry).registerMetric !== 'function') {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      "collectMetrics(registry, …): registry must be a prom-client Registry (import { register } from 'prom-client').",
    );
  }
  return states.get(registry) ?? register(registry);
}

/**
 * Count ranges handed to remote clients (idlease serve's lease route): they are served from
 * the client's memory, so no allocator here sees them. `count(tag, 0)` makes a tag's series
 * exist before its first lease.
 */
export function remoteLeaseCounter(registry: Registry): (tag: string, ids: number) => void {
  const state = stateOf(registry);
  return (tag, ids) => {
    state.remoteLeases.inc({ tag }, ids > 0 ? 1 : 0);
    state.remoteLeaseIds.inc({ tag }, ids);
  };
}

/**
 * Export the allocators' metrics on `registry` (prom-client's `register` or your own).
 * Call again to add more allocators; the returned function stops exporting these ones.
 */
export function collectMetrics(registry: Registry, ...allocators: Observable[]): () => void {
  const state = stateOf(registry);
  const stops: Array<() => void> = [];
  for (const a of allocators) {
    if (isSnowflake(a)) {
      state.snowflakes.add(a);
      startOnce(state, state.renewalSeconds, { group: a.group });
      stops.push(
        a.onEvent((e: SnowflakeEvent) => {
          if (e.type === 'renewed') state.renewalSeconds.observe({ group: a.group }, e.latencyMs / 1000);
        }),
        () => state.snowflakes.delete(a),
      );
    } else if (isRedisSequence(a)) {
      state.redisSequences.add(a);
      stops.push(() => state.redisSequences.delete(a));
    } else if (isSegment(a)) {
      state.segments.add(a);
      startOnce(state, state.leaseSeconds, { tag: a.tag });
      stops.push(
        a.onEvent((e: SegmentEvent) => {
          if (e.type === 'lease') state.leaseSeconds.observe({ tag: e.tag }, e.ms / 1000);
          else if (e.type === 'lease-error') {
            state.leaseErrors.inc({ tag: e.tag, code: errorCode(e.error) });
            state.segmentErrorAt.set(e.tag, Date.now());
          }
        }),
        () => state.segments.delete(a),
      );
    } else if (isTicket(a)) {
      state.tickets.add(a);
      stops.push(() => state.tickets.delete(a));
    } else {
      throw new IdleaseError(
        'BAD_ARGUMENT',
        'collectMetrics(registry, ...allocators): each allocator must come from createSegmentAllocator, createTicketAllocator, createSnowflakeAllocator or createRedisSequence.',
      );
    }
  }
  return () => {
    for (const stop of stops) stop();
  };
}
