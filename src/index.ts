export { IdleaseError, isIdleaseError, errorCategory, ERROR_CATEGORIES, type IdleaseErrorCode, type IdleaseErrorCategory, type CliWording } from './errors.js';
export type { ConnectionProblem } from './dialects/connection-errors.js';
export { connect, knexConfig, type ConnectOptions } from './connect.js';
export { MAX_INT64, MAX_UINT64 } from './ids.js';
export { migrate, unlockMigrations, planMigrations, type MigrateOptions, type MigrateResult } from './migrations/migrate.js';
export { DEFAULT_SCHEMA } from './dialects/detect.js';
export * from './segment/index.js';
export * from './ticket/index.js';
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
export type { WorkersMigrateOptions } from './migrations/workers.js';
export * from './snowflake/index.js';
export { bumpNextId, type BumpNextIdOptions, type NextIdBumpResult } from './next-id/admin.js';
