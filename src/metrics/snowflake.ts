/** Snowflake allocators' metrics: one table by group, and the renewal latency its events give. */
import { Histogram, type Registry } from 'prom-client';
import type { SnowflakeAllocator, SnowflakeEvent, SnowflakeStats } from '../snowflake/types.js';
import { LATENCY_BUCKETS, startOnce } from './segment.js';
import { table, type KindMetrics } from './table.js';

export interface SnowflakeInstruments {
  readonly renewalSeconds: Histogram<'group'>;
  readonly started: Set<string>;
}

export const snowflakeMetrics: KindMetrics<SnowflakeAllocator, SnowflakeInstruments> = {
  instruments: (registry: Registry) => ({
    renewalSeconds: new Histogram({
      name: 'idlease_snowflake_renewal_duration_seconds',
      help: 'Worker-id lease renewal latency.',
      labelNames: ['group'],
      registers: [registry],
      buckets: LATENCY_BUCKETS,
    }),
    started: new Set(),
  }),
  tables: () => [
    table<SnowflakeAllocator, SnowflakeStats>({
      label: 'group',
      series: (a) => {
        const s = a.stats();
        return [[s.group, s]];
      },
      rows: [
        ['idlease_snowflake_ids_issued_total', 'IDs handed out by snowflake allocators.', (s) => s.issued],
        ['idlease_snowflake_claims_total', 'Worker ids claimed.', (s) => s.claims],
        ['idlease_snowflake_renewals_total', 'Worker-id lease renewals confirmed by the database.', (s) => s.renewals],
        ['idlease_snowflake_lease_errors_total', 'Failed claims and renewals (each is retried).', (s) => s.leaseErrors],
        [
          'idlease_snowflake_leases_lost_total',
          'Leases found taken by another holder after they ran out (the process was paused or cut off past leaseTtlMs).',
          (s) => s.lost,
        ],
        [
          'idlease_snowflake_clock_waits_total',
          'Calls that waited because the wall clock was more than maxLeadMs behind the last issued time.',
          (s) => s.clockWaits,
        ],
        [
          'idlease_snowflake_failover_waits_total',
          'Claims that waited out a lease before issuing: the database instance was not the one the worker table was last settled on (a failover).',
          (s) => s.failoverWaits,
        ],
        [
          'idlease_snowflake_timeouts_total',
          'Calls that gave up waiting (DB_UNAVAILABLE, NO_WORKER_ID, CLOCK_BACKWARDS).',
          (s) => s.timeouts,
        ],
        [
          'idlease_snowflake_lease_valid',
          'Allocators whose worker-id lease is valid now, so next() issues without waiting (1 per healthy process).',
          (s) => (s.fenced ? 1 : 0),
        ],
        [
          'idlease_snowflake_worker_id',
          'The worker id held (-1 while none is); with several allocators of one group in a registry, the highest.',
          (s) => s.workerId ?? -1,
          'highest',
        ],
        [
          'idlease_snowflake_lead_seconds',
          'How far the last issued time is ahead of the wall clock (borrowed time, at most maxLeadMs); the largest per group.',
          (s) => s.leadMs / 1000,
          'highest',
        ],
      ],
    }),
  ],
  watch: (a, x) => {
    startOnce(x.started, x.renewalSeconds, { group: a.group });
    return a.onEvent((e: SnowflakeEvent) => {
      if (e.type === 'renewed') x.renewalSeconds.observe({ group: a.group }, e.latencyMs / 1000);
    });
  },
};
