export { createSegmentAllocator } from './allocator.js';
export type { SegmentAllocatorOptions } from './options.js';
export type { IdRange, SegmentAllocator, SegmentStats, SegmentEvent } from './types.js';
export {
  createKnexSegmentStore,
  createPoolSegmentStore,
  type SegmentStore,
  type SegmentLeaseResult,
  type SqlSegmentStoreOptions,
} from './store.js';
export {
  addTag,
  bumpTag,
  listTags,
  setFailoverGap,
  setStep,
  type AddTagOptions,
  type BumpTagOptions,
  type BumpedTag,
  type TagTableOptions,
  type SegmentRow,
} from './admin.js';
