import { resolveLayout } from '../../src/layout/index.js';

/**
 * 1 worker bit (2 ids): a third process waits for an id, so the one a cut-off holder loses is
 * taken over at once. 10 ms units: two holders of one id issuing at the same time would share a
 * unit far more often than in 1 ms units at the workers' modest pace.
 */
export const PARTITION_LAYOUT = resolveLayout({
  timeBits: 41,
  shardBits: 1,
  sequenceBits: 12,
  timeUnitMs: 10,
  epoch: '2024-01-01T00:00:00Z',
});
