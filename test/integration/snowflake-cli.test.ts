/** `idlease snowflake next` and `idlease workers list` through the CLI entry point, on PostgreSQL. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { decodeId, LAYOUT_PRESETS } from '../../src/layout/index.js';
import { runMain } from '../helpers/in-process.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('postgres', 'snowflake_cli');
});
afterAll(async () => {
  await db?.drop();
});

const run = runMain;

describe('idlease snowflake / workers', () => {
  it('before migrate --workers, snowflake next says what to run', async () => {
    const r = await run(['--url', db.url, 'snowflake', 'next']);
    expect(r.code).not.toBe(0);
    expect(r.err).toMatch(/migrate --workers/);
  });

  it('snowflake next -n prints increasing IDs of the preset; workers list shows the released lease', async () => {
    expect((await run(['--url', db.url, 'migrate', '--no-segments', '--workers'])).code).toBe(0);
    const r = await run(['--url', db.url, '--json', 'snowflake', 'next', '-n', '5', '--group', 'orders', '--preset', 'twitter']);
    expect(r.code, r.err).toBe(0);
    const body = JSON.parse(r.out) as { workerId: number; ids: string[] };
    expect(body.workerId).toBe(0);
    const ids = body.ids.map(BigInt);
    for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!).toBe(true);
    expect(Math.abs(decodeId(ids[0]!, LAYOUT_PRESETS.twitter).unixMs - Date.now())).toBeLessThan(60_000);
    const list = await run(['--url', db.url, '--json', 'workers', 'list', '--group', 'orders']);
    const rows = JSON.parse(list.out) as Array<{ group: string; workerId: number; alive: boolean; maxTimeMs: string }>;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ group: 'orders', workerId: 0, alive: false });
    expect(BigInt(rows[0]!.maxTimeMs)).toBeGreaterThanOrEqual(BigInt(decodeId(ids[4]!, LAYOUT_PRESETS.twitter).unixMs));
  });
});
