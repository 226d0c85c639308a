import { resolveLayout } from '../../src/layout/index.js';

/**
 * 1 worker bit (two ids): processes started after the failover must take the ids the old ones
 * held. 10 ms time units: two holders of one id issuing at once (what the failover wait prevents)
 * then share a unit, and so collide, far more often than in 1 ms units at the workers' pace.
 */
export const SNOWFLAKE_HA_LAYOUT = resolveLayout({
  timeBits: 41,
  shardBits: 1,
  sequenceBits: 12,
  timeUnitMs: 10,
  epoch: '2024-01-01T00:00:00Z',
});
