import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // The JSON report feeds scripts/test-summary.mjs (tests per database) in CI.
    reporters: ['default', ['json', { outputFile: 'test-results/vitest.json' }]],
  },
});
