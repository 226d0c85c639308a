/** Redis sequences' metrics: one table by tag (one Redis key per tag). */
import type { RedisSequence, RedisSequenceStats } from '../redis-sequence/types.js';
import { table, type KindMetrics } from './table.js';

export const redisMetrics: KindMetrics<RedisSequence, undefined> = {
  instruments: () => undefined,
  tables: () => [
    table<RedisSequence, RedisSequenceStats>({
      label: 'tag',
      series: (a) => {
        const s = a.stats();
        return [[s.tag, s]];
      },
      rows: [
        ['idlease_redis_ids_served_total', 'IDs handed out by Redis sequences.', (s) => s.served],
        ['idlease_redis_calls_total', 'Redis script calls made by Redis sequences.', (s) => s.calls],
        ['idlease_redis_windows_total', 'Windows leased from the database and installed in Redis.', (s) => s.windows],
        [
          'idlease_redis_reseeds_total',
          'Keys found written by another Redis incarnation (restart, restore, promotion) or missing, and re-seeded.',
          (s) => s.reseeds,
        ],
        [
          'idlease_redis_lost_windows_total',
          'Windows leased but not installed (a race or a Redis change): given back or a gap.',
          (s) => s.lostWindows,
        ],
        [
          'idlease_redis_regressions_total',
          "Windows refused because the tag's row went below what Redis had issued.",
          (s) => s.regressions,
        ],
        ['idlease_redis_errors_total', 'Failed Redis calls (each retried within waitTimeoutMs).', (s) => s.redisErrors],
        [
          'idlease_redis_timeouts_total',
          'Calls that failed with REDIS_UNAVAILABLE or DB_UNAVAILABLE after waitTimeoutMs.',
          (s) => s.timeouts,
        ],
        [
          'idlease_redis_left_ids',
          'IDs left in the key (current + prefetched window) at the last call: a gap if Redis is lost now. One key per tag: the largest report.',
          (s) => s.left,
          'highest',
        ],
        [
          'idlease_redis_rate_ids_per_second',
          'Issue rate of the key (all processes), as measured; the largest report.',
          (s) => s.ratePerSecond ?? 0,
          'highest',
        ],
      ],
    }),
  ],
  watch: () => () => {},
};
