import { resolveLayout } from '../../src/layout/index.js';

/** 2 worker bits (4 ids): more processes than ids forces takeovers. */
export const STRESS_LAYOUT = resolveLayout({ timeBits: 41, shardBits: 2, sequenceBits: 12, epoch: '2024-01-01T00:00:00Z' });
