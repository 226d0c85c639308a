/**
 * The last IDs exactly (issue 42, item 6): a batch that reaches 2^63−1 hands out what is left,
 * then EXHAUSTED, on every path — the library's nextBatch, the CLI's `next -n`, serve's
 * `/v1/segment/{tag}/ids`. It used to reject the whole batch with EXHAUSTED, and the IDs it held
 * were gone with it: `tag add big2 --start 9223372036854775806`, `next big2 -n 3` printed nothing
 * and burned both. `tickets next -n` likewise prints the last tickets of its servers before EXHAUSTED.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSegmentAllocator } from '../../src/segment/index.js';
import { addTag } from '../../src/segment/admin.js';
import { MAX_INT64 } from '../../src/ids.js';
import { migrate } from '../../src/migrations/migrate.js';
import { ALL_FLAVORS, createTestDb, type TestDb } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';
import { startServe } from '../helpers/serve-process.js';

const LAST_TWO = [MAX_INT64 - 1n, MAX_INT64];

describe.each(ALL_FLAVORS)('the last IDs below 2^63−1 on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'lastids');
    await migrate(db.knex);
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('nextBatch(3) with two IDs left: those two, then EXHAUSTED for a batch and for next()', async () => {
    await addTag(db.knex, { tag: 'big2', start: MAX_INT64 - 1n });
    const a = createSegmentAllocator({ knex: db.knex, tag: 'big2' });
    try {
      expect(await a.nextBatch(3)).toEqual(LAST_TWO);
      await expect(a.nextBatch(1)).rejects.toMatchObject({ code: 'EXHAUSTED' });
      await expect(a.next()).rejects.toMatchObject({ code: 'EXHAUSTED' });
    } finally {
      await a.close();
    }
  });

  it('a batch spanning memory and the last lease: everything left, in order, then EXHAUSTED', async () => {
    await addTag(db.knex, { tag: 'big3', start: MAX_INT64 - 9n, step: 4 });
    const a = createSegmentAllocator({ knex: db.knex, tag: 'big3', minStep: 4, maxStep: 4 });
    try {
      expect(await a.nextBatch(2)).toEqual([MAX_INT64 - 9n, MAX_INT64 - 8n]);
      // Two in memory, then leases of 4 and of the last 2: eight IDs for a batch of 20.
      expect(await a.nextBatch(20)).toEqual(Array.from({ length: 8 }, (_, i) => MAX_INT64 - 7n + BigInt(i)));
      await expect(a.nextBatch(20)).rejects.toMatchObject({ code: 'EXHAUSTED' });
    } finally {
      await a.close();
    }
  });

  it('a second process meets EXHAUSTED at once, with nothing handed out twice', async () => {
    await addTag(db.knex, { tag: 'big4', start: MAX_INT64 - 2n });
    const [a, b] = [1, 2].map(() => createSegmentAllocator({ knex: db.knex, tag: 'big4', minStep: 1, maxStep: 1 }));
    try {
      const got = [...(await a!.nextBatch(2)), ...(await b!.nextBatch(5))];
      expect(got.sort((x, y) => (x < y ? -1 : 1))).toEqual([MAX_INT64 - 2n, ...LAST_TWO]);
      await expect(a!.nextBatch(1)).rejects.toMatchObject({ code: 'EXHAUSTED' });
      await expect(b!.next()).rejects.toMatchObject({ code: 'EXHAUSTED' });
    } finally {
      await Promise.all([a!.close(), b!.close()]);
    }
  });
});

describe('the last IDs through the CLI and serve', () => {
  let my: TestDb;
  let cwd: string;
  beforeAll(async () => {
    my = await createTestDb('mysql', 'lastids_cli');
    cwd = mkdtempSync(path.join(tmpdir(), 'idlease-lastids-'));
  });
  afterAll(async () => {
    await my?.drop();
    if (cwd) rmSync(cwd, { recursive: true, force: true });
  });

  it.each([
    ['MariaDB', () => ['--url', my.url]],
    ['the embedded default', () => []],
  ] as const)('next big2 -n 3 on %s prints the two IDs left, then says EXHAUSTED (exit 1); the next run prints nothing', async (_, url) => {
    const add = await runCli([...url(), 'migrate'], { cwd });
    expect(add.code, add.stderr).toBe(0);
    const added = await runCli([...url(), 'tag', 'add', 'big2', '--start', '9223372036854775806'], { cwd });
    expect(added.code, added.stderr).toBe(0);
    const r = await runCli([...url(), 'next', 'big2', '-n', '3'], { cwd });
    expect(r.stdout).toBe('9223372036854775806\n9223372036854775807\n');
    expect(r.stderr).toMatch(/^idlease: EXHAUSTED: .*2 of the 3 IDs asked for.*2\^63−1/);
    expect(r.code).toBe(1);
    const again = await runCli([...url(), '--json', 'next', 'big2'], { cwd });
    expect(again.stdout).toBe('');
    expect(again.stderr).toMatch(/EXHAUSTED/);
    expect(again.code).toBe(1);
  });

  it('tickets next -n 3 with two tickets left below 2^63−1 prints them, then says EXHAUSTED (exit 1)', async () => {
    const m = await runCli(['--url', my.url, 'migrate', '--no-segments', '--tickets', 'last']);
    expect(m.code, m.stderr).toBe(0);
    await my.knex.raw('ALTER TABLE idlease_tickets_last AUTO_INCREMENT = 9223372036854775806');
    const r = await runCli(['tickets', 'next', '-n', '3', '--sequence', 'last', '--server', my.url]);
    expect(r.stdout).toBe('9223372036854775806\n9223372036854775807\n');
    expect(r.stderr).toMatch(/^idlease: EXHAUSTED: /);
    expect(r.code).toBe(1);
  });

  it('serve /v1/segment/big5/ids?n=3: the two IDs left (200), then EXHAUSTED', async () => {
    const added = await runCli(['--url', my.url, 'tag', 'add', 'big5', '--start', '9223372036854775806']);
    expect(added.code, added.stderr).toBe(0);
    const serve = await startServe(my.url);
    try {
      const first = await fetch(`${serve.url}/v1/segment/big5/ids?n=3`);
      expect(first.status).toBe(200);
      const body = await first.text();
      expect(body).toMatch(/9223372036854775806[^\d]+9223372036854775807/);
      expect(body).not.toMatch(/9223372036854775805/);
      const second = await fetch(`${serve.url}/v1/segment/big5/ids?n=3`);
      expect(second.status).toBe(500);
      expect(await second.text()).toMatch(/EXHAUSTED/);
    } finally {
      await serve.stop();
    }
  });
});
