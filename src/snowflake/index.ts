export { createSnowflakeAllocator } from './allocator.js';
export { SYSTEM_CLOCK, type SnowflakeAllocatorOptions, type SnowflakeClock } from './options.js';
export type { SnowflakeAllocator, SnowflakeEvent, SnowflakeStats } from './types.js';
export {
  createKnexWorkerIdStore,
  createPoolWorkerIdStore,
  type WorkerIdStore,
  type WorkerClaim,
  type WorkerHolder,
  type WorkerRow,
} from './worker-store.js';
