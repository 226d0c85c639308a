import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Allocators check their state machine after every slow-path step and fail loudly (src/segment/allocator.ts).
    env: { IDLEASE_ASSERT_STATE: '1' },
    // The JSON report feeds scripts/test-summary.mjs (tests per database) in CI.
    reporters: ['default', ['json', { outputFile: 'test-results/vitest.json' }]],
  },
});
