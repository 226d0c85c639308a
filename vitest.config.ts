import { defineConfig } from 'vitest/config';
import { groupMarks } from './test/helpers/group-marks.js';

// Files that kill, pause or fail over servers, load every core, or assert a latency bound run
// one at a time after the rest, on a machine nothing else in the suite is loading.
const ALONE = [
  'test/ha/**/*.test.ts',
  'test/stress/**/*.test.ts',
  // Redis sequence: private redis-server processes killed, restored and failed over under OS workers.
  'test/redis/**/*.test.ts',
  // Network namespaces and packet drops around private servers (test/helpers/partition.ts).
  'test/partition/**/*.test.ts',
  'test/integration/next-id-bound.test.ts',
  'test/integration/next-id-crash.test.ts',
  // npm pack, npm install and tsc in a temp app: minutes of CPU.
  'test/package/**/*.test.ts',
  // The seeded fault schedule over every mechanism (test/chaos/run.ts): servers killed and frozen.
  'test/chaos/**/*.test.ts',
];

// Failovers of private servers (behind a router, between replicas, in a Galera cluster), a
// server killed mid-run, and the package install: each mostly waits (an HA manager's timers, a
// standby catching up, a node rejoining, npm) and asserts duplicates, jumps and typed errors,
// never time. They run three at a time (two cores: while one waits on a timer the others run),
// after the shared files and before the one-at-a-time files.
// (A project with maxWorkers 1 at groupOrder 0 is not run beside the others: vitest puts such
// files in a group of their own, after every other group.)
const FAILOVERS = [
  'test/ha/patroni.test.ts',
  'test/ha/patroni-next-id.test.ts',
  'test/ha/pg-replication.test.ts',
  'test/ha/mariadb-replication.test.ts',
  'test/ha/next-id-mariadb-failover.test.ts',
  'test/ha/galera.test.ts',
  'test/ha/pgbouncer.test.ts',
  // A hand-made row on a promoted PostgreSQL standby (two private servers, seconds).
  'test/ha/hand-row-standby.test.ts',
  // Two promotions in a row, the second losing the first one's jump (three private servers, seconds).
  'test/ha/pg-two-promotions.test.ts',
  'test/redis/redis-db-failover.test.ts',
  'test/integration/next-id-crash.test.ts',
  'test/package/pack-install.test.ts',
  'test/package/npx-checkout.test.ts',
  // Partition and Redis files that wait on timers and assert no call time within less than seconds
  // of slack: TCP keepalive behind a silent cut (2 s slack on 12 s), the partition harness,
  // snowflake renewals behind a 200 ms link (a 10 s lease), a password-protected Redis Cluster.
  'test/partition/keepalive.test.ts',
  'test/partition/harness.test.ts',
  'test/partition/snowflake-delay.test.ts',
  'test/redis/redis-cluster-auth.test.ts',
];

// Pure logic on in-memory stores and injected clocks: no database and no build (nothing here runs
// bin/idlease.js), so `npm run test:unit` runs anywhere in seconds. The other projects find the
// real databases first (global-setup.ts) and run the built CLI.
const UNIT = ['test/unit/**/*.test.ts'];
// The database projects run the CLI built (test/helpers/built-cli.ts rebuilds dist/ when the sources are newer).
const BUILT = 'test/helpers/built-cli.ts';
const DATABASES = [BUILT, 'test/helpers/global-setup.ts'];
// The docs samples and the recipe pages need the recipe tools (Prisma, TypeORM, …), which have an
// install of their own in test/recipes/: this project installs it first when it is missing or
// stale (test/helpers/recipe-tools.ts), and only when one of these files is in the run.
const DOCS = ['test/docs/**/*.test.ts', 'test/recipes/**/*.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Test files open PGlite again and again, each for seconds: V8's baseline WebAssembly code only,
    // as the CLI's short commands run it (src/cli/bin.ts), not optimized on top. Seven PGlite-heavy
    // files took 0.75× the CPU this way (52 against 69 CPU-seconds, same results).
    execArgv: ['--liftoff-only'],
    // Allocators check their state machine after every slow-path step and fail loudly (src/segment/allocator.ts).
    env: { IDLEASE_ASSERT_STATE: '1' },
    // The JSON report feeds scripts/test-summary.mjs (tests per database) in CI; the unit run
    // writes its own (scripts/test-unit.mjs passes --outputFile.json).
    // IDLEASE_GROUP_MARKS: .ci/run learns when the one-at-a-time group starts (test/helpers/group-marks.ts).
    reporters: ['default', 'json', ...groupMarks(process.env.IDLEASE_GROUP_MARKS)],
    outputFile: { json: 'test-results/vitest.json' },
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: UNIT, maxWorkers: 2, sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        // Each file has databases of its own, so two run at once: most of their time is spent
        // waiting on a server or a child process, not on a core.
        test: {
          name: 'shared',
          include: ['test/**/*.test.ts'],
          exclude: [...UNIT, ...ALONE, ...DOCS],
          globalSetup: DATABASES,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        // Same group and workers as 'shared': its files share the same two workers.
        test: {
          name: 'docs',
          include: DOCS,
          globalSetup: [...DATABASES, 'test/helpers/recipe-tools.ts'],
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'failover', include: FAILOVERS, globalSetup: DATABASES, maxWorkers: 3, sequence: { groupOrder: 1 } },
      },
      {
        extends: true,
        test: {
          name: 'alone',
          include: ALONE,
          exclude: FAILOVERS,
          globalSetup: DATABASES,
          maxWorkers: 1,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
