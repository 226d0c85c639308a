/** `idlease/testing`: what people writing their own store run against it. No test runner is imported. */
export { segmentStoreConformance, type SegmentStoreCheck, type SegmentStoreHarness } from './segment-store-conformance.js';
export type { SegmentStore, SegmentLeaseResult } from '../segment/store.js';
