import { defineConfig } from 'vitest/config';

// Files that kill, pause or fail over servers, load every core, or assert a latency bound run
// one at a time after the rest, on a machine nothing else in the suite is loading.
const ALONE = [
  'test/ha/**/*.test.ts',
  'test/stress/**/*.test.ts',
  'test/integration/next-id-bound.test.ts',
  'test/integration/next-id-crash.test.ts',
  // npm pack, npm install and tsc in a temp app: minutes of CPU.
  'test/package/**/*.test.ts',
];

export default defineConfig({
  test: {
    globalSetup: ['test/helpers/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Allocators check their state machine after every slow-path step and fail loudly (src/segment/allocator.ts).
    env: { IDLEASE_ASSERT_STATE: '1' },
    // The JSON report feeds scripts/test-summary.mjs (tests per database) in CI.
    reporters: ['default', ['json', { outputFile: 'test-results/vitest.json' }]],
    projects: [
      {
        extends: true,
        // Each file has databases of its own, so two run at once: most of their time is spent
        // waiting on a server or a child process, not on a core.
        test: { name: 'shared', include: ['test/**/*.test.ts'], exclude: ALONE, maxWorkers: 2, sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: { name: 'alone', include: ALONE, maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
