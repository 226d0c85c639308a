/**
 * Every admin command is safe beside running allocators (issue 42, item 3): each command runs as
 * the CLI process a user starts, while allocators in this process draw through it, and every ID
 * they handed out is checked for a repeat. Segments: `tag set-step` (up, down, to 1), `tag bump
 * --by`/`--to`, `tag set-failover-gap`, each while three allocators of different steps draw on
 * MariaDB and on PostgreSQL. Snowflake: `workers list` while three allocators of one group draw.
 * Tickets (`tickets reshard`, a grow, a retire) are drawn through in ticket-scheme.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSegmentAllocator, type SegmentAllocator } from '../../src/segment/index.js';
import { addTag } from '../../src/segment/admin.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';
import { drawing, repeats } from '../helpers/drawing.js';

describe.each(['mysql', 'postgres'] as const)('segment admin commands while allocators draw on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'admin_live');
    await migrate(db.knex);
  });
  afterAll(async () => {
    await db?.drop();
  });

  /** Three allocators with steps of their own (one of them batches) on `tag`, drawing while `admin` runs. */
  async function through(tag: string, admin: (cli: (...args: string[]) => Promise<void>) => Promise<void>): Promise<bigint[]> {
    await addTag(db.knex, { tag, step: 50 });
    const allocs: SegmentAllocator[] = [
      createSegmentAllocator({ knex: db.knex, tag }),
      createSegmentAllocator({ knex: db.knex, tag, minStep: 3, maxStep: 3 }),
      createSegmentAllocator({ knex: db.knex, tag, minStep: 200, maxStep: 5000 }),
    ];
    const run = drawing([() => allocs[0]!.next(), () => allocs[1]!.next(), () => allocs[2]!.nextBatch(7), () => allocs[0]!.nextBatch(3)]);
    try {
      await run.more(500);
      await admin(async (...args) => {
        const r = await runCli(['--url', db.url, ...args]);
        expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
        // Each command's effect is drawn through before the next one runs.
        await run.more(500);
      });
      await run.stop();
    } finally {
      await run.stop();
      await Promise.all(allocs.map((a) => a.close()));
    }
    expect(run.errors).toEqual([]);
    expect(repeats(run.ids)).toBe(0);
    return run.ids;
  }

  it('tag set-step up, down and to 1: 0 repeats', async () => {
    const ids = await through('setstep', async (cli) => {
      for (const step of ['100000', '7', '1', '2500']) await cli('tag', 'set-step', 'setstep', step);
    });
    expect(ids.length).toBeGreaterThanOrEqual(2500);
  });

  it('tag bump --by and --to: 0 repeats, and what is drawn after a bump is above it', async () => {
    let target = 0n;
    const ids = await through('bumped', async (cli) => {
      await cli('tag', 'bump', 'bumped', '--by', '1000000');
      const row = await db.knex.raw(
        flavor === 'mysql'
          ? 'SELECT CAST(max_id AS CHAR) AS m FROM idlease_segments WHERE tag = ?'
          : 'SELECT max_id::text AS m FROM idlease.idlease_segments WHERE tag = ?',
        ['bumped'],
      );
      target = BigInt((flavor === 'mysql' ? row[0][0].m : row.rows[0].m) as string) + 5_000_000n;
      await cli('tag', 'bump', 'bumped', '--to', String(target));
    });
    // Allocators finish the ranges they held, then lease above the bump.
    expect(ids.some((id) => id > target)).toBe(true);
  });

  it('tag set-failover-gap: 0 repeats', async () => {
    await through('gapped', async (cli) => {
      await cli('tag', 'set-failover-gap', 'gapped', '1000000');
      await cli('tag', 'set-failover-gap', 'gapped', '10000000000');
    });
  });
});

describe('workers list while snowflake allocators draw', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'admin_live_workers');
    await migrate(db.knex, { segments: false, workers: true });
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('three allocators of one group, workers list run three times: 0 repeats, each holder listed alive', async () => {
    const allocs = [1, 2, 3].map(() => createSnowflakeAllocator({ knex: db.knex, group: 'live' }));
    const run = drawing(allocs.map((a) => () => a.nextBatch(50)));
    try {
      await run.more(3000);
      for (let i = 0; i < 3; i++) {
        const r = await runCli(['--url', db.url, '--json', 'workers', 'list', '--group', 'live']);
        expect(r.code, r.stderr).toBe(0);
        const rows = JSON.parse(r.stdout) as Array<{ alive: boolean }>;
        expect(rows.filter((w) => w.alive)).toHaveLength(3);
        await run.more(3000);
      }
      await run.stop();
    } finally {
      await run.stop();
      await Promise.all(allocs.map((a) => a.close()));
    }
    expect(run.errors).toEqual([]);
    expect(repeats(run.ids)).toBe(0);
  });
});
