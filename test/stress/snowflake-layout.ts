import { resolveLayout } from '../../src/layout/index.js';

/**
 * 2 worker bits (4 ids): more processes than ids forces takeovers. 10 ms time units: two holders
 * of one id issuing at the same time (what fencing prevents) then share a unit, and so collide,
 * far more often than in 1 ms units at the workers' modest pace.
 */
export const STRESS_LAYOUT = resolveLayout({ timeBits: 41, shardBits: 2, sequenceBits: 12, timeUnitMs: 10, epoch: '2024-01-01T00:00:00Z' });
