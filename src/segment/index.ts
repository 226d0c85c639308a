// Placeholder: the segment allocator issue fills this in (createSegmentAllocator, step policy, double buffer).
export {};
