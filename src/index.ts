export {
  IdleaseError,
  isIdleaseError,
  errorCategory,
  ERROR_CATEGORIES,
  type IdleaseErrorCode,
  type IdleaseErrorCategory,
  type CliWording,
} from './errors.js';
export type { ConnectionProblem } from './dialects/connection-errors.js';
export { connect, knexConfig, type ConnectOptions } from './connect.js';
export { MAX_INT64, MAX_UINT64 } from './ids.js';
export { migrate, unlockMigrations, planMigrations, type MigrateOptions, type MigrateResult } from './migrations/migrate.js';
export { DEFAULT_SCHEMA } from './dialects/detect.js';
export {
  createSegmentAllocator,
  createKnexSegmentStore,
  createPoolSegmentStore,
  addTag,
  bumpTag,
  listTags,
  setFailoverGap,
  setStep,
  type SegmentAllocatorOptions,
  type SegmentAllocator,
  type SegmentStats,
  type IdRange,
  type SegmentEvent,
  type SegmentStore,
  type SegmentLeaseResult,
  type SqlSegmentStoreOptions,
  type AddTagOptions,
  type BumpTagOptions,
  type BumpedTag,
  type TagTableOptions,
  type SegmentRow,
} from './segment/index.js';
export {
  createTicketAllocator,
  reshardTickets,
  type TicketAllocator,
  type TicketAllocatorOptions,
  type TicketServerOptions,
  type TicketServerStatus,
  type TicketServerHealth,
  type TicketEvent,
  type TicketStats,
  type TicketSource,
  type TicketServerFacts,
  type TicketScheme,
  type ReshardOptions,
  type ReshardResult,
  type ReshardServer,
  type TicketEngine,
} from './ticket/index.js';
// The layout's arithmetic helpers (shard checks, epoch parsing, counters) stay internal.
export {
  decodeId,
  encodeId,
  resolveLayout,
  layoutPreset,
  layoutLimits,
  DEFAULT_LAYOUT,
  DEFAULT_EPOCH_MS,
  LAYOUT_PRESETS,
  type IdLayout,
  type LayoutOptions,
  type LayoutOrder,
  type LayoutPreset,
  type LayoutLimits,
  type IdParts,
  type DecodedId,
} from './layout/index.js';
export type { SegmentsMigrateOptions } from './migrations/segments.js';
export type { NextIdMigrateOptions } from './migrations/next-id.js';
export { nextIdKnexMigration } from './migrations/knexfile.js';
export type { WorkersMigrateOptions } from './migrations/workers.js';
export type { TicketsMigrateOptions } from './migrations/tickets.js';
export {
  createSnowflakeAllocator,
  createKnexWorkerIdStore,
  createPoolWorkerIdStore,
  SYSTEM_CLOCK,
  type SnowflakeAllocatorOptions,
  type SnowflakeClock,
  type SnowflakeAllocator,
  type SnowflakeEvent,
  type SnowflakeStats,
  type WorkerIdStore,
  type WorkerClaim,
  type WorkerHolder,
  type WorkerRow,
} from './snowflake/index.js';
// Option types name a Knex instance by shape, so that an app on a pool compiles without knex.
export type { KnexLike, KnexOrPool } from './drivers/index.js';
export { bumpNextId, type BumpNextIdOptions, type NextIdBumpResult } from './next-id/admin.js';
export {
  attachNextId,
  detachNextId,
  nextIdStatus,
  type AttachNextIdOptions,
  type NextIdAttachment,
  type NextIdStatus,
} from './next-id/attach.js';
export {
  createRedisSequence,
  redisKeyStatus,
  type RedisSequenceOptions,
  type RedisSequence,
  type RedisSequenceStats,
  type RedisSequenceEvent,
  type KeyStatus,
} from './redis-sequence/index.js';
