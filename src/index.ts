export { IdleaseError, isIdleaseError, type IdleaseErrorCode } from './errors.js';
export { connect, knexConfig, type ConnectOptions } from './connect.js';
export { MAX_INT64, MAX_UINT64 } from './ids.js';
export { migrate, unlockMigrations, planMigrations, type MigrateOptions, type MigrateResult } from './migrations/migrate.js';
export * from './segment/index.js';
export * from './ticket/index.js';
export * from './layout/index.js';
export type { SegmentsMigrateOptions } from './migrations/segments.js';
export type { NextIdMigrateOptions } from './migrations/next-id.js';
