export { createRedisSequence } from './sequence.js';
export type { RedisSequenceOptions } from './options.js';
export type { RedisSequence, RedisSequenceStats, RedisSequenceEvent } from './types.js';
export { redisKeyStatus, type KeyStatus } from './status.js';
