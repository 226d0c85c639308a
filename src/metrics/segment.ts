/** Segment allocators' metrics: one table by tag, and what only events can say (lease latency, errors by code). */
import { Counter, Histogram, type Registry } from 'prom-client';
import { isIdleaseError } from '../errors.js';
import type { SegmentAllocator, SegmentEvent, SegmentStats } from '../segment/types.js';
import { renderHistogramFast } from './render.js';
import { table, type KindMetrics } from './table.js';

export interface SegmentInstruments {
  readonly leaseSeconds: Histogram<'tag'>;
  readonly leaseErrors: Counter<'tag' | 'code'>;
  /** When each tag's last lease failed (ms since the epoch). */
  readonly errorAt: Map<string, number>;
  /** Ranges handed to remote clients (idlease serve's lease route): no allocator here sees them. */
  readonly remoteLeases: Counter<'tag'>;
  readonly remoteLeaseIds: Counter<'tag'>;
  /** Histogram series already created: zero() on one that exists would wipe its counts. */
  readonly started: Set<string>;
}

export const LATENCY_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export const segmentMetrics: KindMetrics<SegmentAllocator, SegmentInstruments> = {
  instruments: (registry: Registry) => ({
    leaseSeconds: fastHistogram(
      new Histogram({
        name: 'idlease_segment_lease_duration_seconds',
        help: 'Segment lease latency (read + update).',
        labelNames: ['tag'],
        registers: [registry],
        buckets: LATENCY_BUCKETS,
      }),
    ),
    leaseErrors: new Counter({
      name: 'idlease_segment_lease_errors_total',
      help: 'Failed lease attempts by error code (each is retried).',
      labelNames: ['tag', 'code'],
      registers: [registry],
    }),
    errorAt: new Map(),
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
    started: new Set(),
  }),
  tables: (x) => [
    table<SegmentAllocator, SegmentStats>({
      label: 'tag',
      series: (a) => {
        const s = a.stats();
        return [[s.tag, s]];
      },
      rows: [
        ['idlease_segment_ids_served_total', 'IDs handed out by segment allocators.', (s) => s.served],
        ['idlease_segment_leases_total', 'Successful segment leases (database round trips that moved max_id).', (s) => s.leases],
        ['idlease_segment_waits_total', 'Calls that found memory empty and waited for a lease.', (s) => s.waits],
        ['idlease_segment_timeouts_total', 'Calls that failed with DB_UNAVAILABLE after waitTimeoutMs.', (s) => s.timeouts],
        [
          'idlease_segment_regressions_total',
          "Leases refused because the tag's row went backwards (failover, restore).",
          (s) => s.regressions,
        ],
        [
          'idlease_segment_failover_jumps_total',
          "Leases that were the first on a new database instance and jumped the tag's row by its failover gap.",
          (s) => s.failoverJumps,
        ],
        ['idlease_segment_remaining_ids', 'IDs in memory (current segment + preloaded one).', (s) => Number(s.remaining)],
        [
          'idlease_segment_runway_seconds',
          'How long the IDs in memory last at the measured rate (+Inf before a rate is known).',
          (s) => (s.ratePerSecond ? Number(s.remaining) / s.ratePerSecond : Number.POSITIVE_INFINITY),
        ],
        ['idlease_segment_step', 'Size of the last lease.', (s) => s.currentStep],
        ['idlease_segment_rate_ids_per_second', 'Measured consumption.', (s) => s.ratePerSecond ?? 0],
        [
          'idlease_segment_last_error_timestamp_seconds',
          'When the last lease failed (0: never).',
          (s) => (x.errorAt.get(s.tag) ?? 0) / 1000,
        ],
      ],
    }),
  ],
  watch: (a, x) => {
    startOnce(x.started, x.leaseSeconds, { tag: a.tag });
    return a.onEvent((e: SegmentEvent) => {
      if (e.type === 'lease') x.leaseSeconds.observe({ tag: e.tag }, e.ms / 1000);
      else if (e.type === 'lease-error') {
        x.leaseErrors.inc({ tag: e.tag, code: errorCode(e.error) });
        x.errorAt.set(e.tag, Date.now());
      }
    });
  },
};

/** A histogram with a series per tag, written by renderMetrics from its series (./render.ts). */
function fastHistogram<L extends string>(h: Histogram<L>): Histogram<L> {
  renderHistogramFast(h as unknown as Histogram<string>);
  return h;
}

/** A histogram's series at zero, made once: zero() on a series that exists would wipe its counts. */
export function startOnce<L extends string>(started: Set<string>, histogram: Histogram<L>, labels: Record<L, string>): void {
  const key = JSON.stringify(labels);
  if (started.has(key)) return;
  started.add(key);
  histogram.zero(labels);
}

function errorCode(err: unknown): string {
  if (isIdleaseError(err)) return err.code;
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' || typeof code === 'number' ? String(code) : 'unknown';
}
