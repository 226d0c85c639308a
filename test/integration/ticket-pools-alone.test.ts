/**
 * Issue 22: a pg.Pool alone runs the ticket allocator on PostgreSQL, and a mysql2 pool alone
 * (callback or promise) on MariaDB, in a process where loading knex fails (helpers/forbid-knex.mjs).
 * Three servers (three databases, increment 3, offsets 1–3), three allocators at once, no duplicate;
 * on MariaDB every connection of the app's own pools still has auto_increment_increment = 1
 * afterwards, and the app's own AUTO_INCREMENT inserts stay consecutive.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/migrations/migrate.js';
import { REPO_ROOT, runNode } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

const FORBID_KNEX = pathToFileURL(path.join(REPO_ROOT, 'test/helpers/forbid-knex.mjs')).href;
const WORKER = path.join(REPO_ROOT, 'test/helpers/ticket-pools-alone.ts');
const SERVERS = 3;
const [ALLOCATORS, CALLERS, EACH] = [3, 4, 25];

interface Drawn {
  ids: string[];
  appSessions: Array<{ inc: number; off: number }>;
  appInsertIds: number[];
}

function runWorker(config: Record<string, unknown>) {
  return runNode(['--import', FORBID_KNEX, builtWorker(WORKER), JSON.stringify(config)]);
}

async function drawAlone(kind: string, dbs: TestDb[]): Promise<Drawn> {
  const res = await runWorker({
    kind,
    urls: dbs.map((d) => d.url),
    increment: SERVERS,
    allocators: ALLOCATORS,
    callers: CALLERS,
    each: EACH,
  });
  expect(res.stderr).toBe('');
  expect(res.code).toBe(0);
  return JSON.parse(res.stdout) as Drawn;
}

function expectTickets(drawn: Drawn, already: readonly string[]): void {
  const all = [...already, ...drawn.ids];
  expect(drawn.ids).toHaveLength(ALLOCATORS * CALLERS * EACH);
  expect(new Set(all).size).toBe(all.length);
  // Every server served (round-robin), each ID in one of the three classes.
  expect(new Set(drawn.ids.map((id) => BigInt(id) % BigInt(SERVERS)))).toEqual(new Set([0n, 1n, 2n]));
}

async function migrated(flavor: 'mysql' | 'postgres'): Promise<TestDb[]> {
  const dbs = await Promise.all(Array.from({ length: SERVERS }, (_, i) => createTestDb(flavor, `tkalone${i + 1}`)));
  for (const [i, db] of dbs.entries()) await migrate(db.knex, { segments: false, tickets: { increment: SERVERS, offset: i + 1 } });
  return dbs;
}

describe('the ticket allocator on pools alone, knex not loadable', () => {
  let mysqlDbs: TestDb[];
  let pgDbs: TestDb[];
  beforeAll(async () => {
    [mysqlDbs, pgDbs] = await Promise.all([migrated('mysql'), migrated('postgres')]);
  });
  afterAll(async () => {
    await Promise.all([...mysqlDbs, ...pgDbs].map((d) => d.drop()));
  });

  it('the guard works: a child that imports knex fails', async () => {
    const res = await runWorker({ kind: 'pg', urls: [], increment: 1, allocators: 0, callers: 0, each: 0, loadKnex: true });
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('knex was loaded');
  });

  it('pg.Pool: three allocators at once over three servers, no duplicate', async () => {
    expectTickets(await drawAlone('pg', pgDbs), []);
  });

  it('mysql2 callback pool, then promise pool: no duplicate across both runs, and the app’s connections keep 1/1', async () => {
    const first = await drawAlone('mysql2', mysqlDbs);
    expectTickets(first, []);
    const second = await drawAlone('mysql2/promise', mysqlDbs);
    expectTickets(second, first.ids);
    for (const drawn of [first, second]) {
      expect(drawn.appSessions).toHaveLength(SERVERS * 3);
      expect(drawn.appSessions.every((s) => s.inc === 1 && s.off === 1)).toBe(true);
    }
    // The app's own inserts, through every connection of each pool: consecutive, as with no tickets at all.
    const perServer = (ids: number[]) => Array.from({ length: SERVERS }, (_, i) => ids.slice(i * 3, i * 3 + 3));
    expect(perServer(first.appInsertIds)).toEqual(Array.from({ length: SERVERS }, () => [1, 2, 3]));
    expect(perServer(second.appInsertIds)).toEqual(Array.from({ length: SERVERS }, () => [4, 5, 6]));
  });
});
