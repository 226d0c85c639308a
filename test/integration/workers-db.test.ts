/** The worker-id lease table and its store on each database: migrations, claim / renew / release, races. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALL_FLAVORS, createTestDb, ownSchemaBuilder, type TestDb } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createKnexWorkerIdStore, newHolder, type WorkerIdStore } from '../../src/snowflake/worker-store.js';
import { up as fileUp, down as fileDown } from '../../migrations/workers/20261123000004_workers.js';
import { isIdleaseError } from '../../src/errors.js';
import { runCli } from '../helpers/cli.js';
import { sleep } from '../helpers/wait.js';

const REF = { schema: undefined, table: 'idlease_workers' };

describe.each(ALL_FLAVORS)('worker ids on %s', (flavor) => {
  let db: TestDb;
  let store: WorkerIdStore;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'workers');
    store = createKnexWorkerIdStore(db.knex, REF);
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('before migrating, a claim is NOT_MIGRATED naming the command', async () => {
    const err = await store.claim('g', 3, newHolder(), 1000).catch((e: unknown) => e);
    expect(isIdleaseError(err, 'NOT_MIGRATED')).toBe(true);
    expect(String((err as Error).message)).toMatch(/migrate --workers/);
  });

  it('the knex migration file and migrate() install the table; down drops it', async () => {
    await fileUp(db.knex);
    expect(await ownSchemaBuilder(db).hasTable('idlease_workers')).toBe(true);
    await fileDown(db.knex);
    expect(await ownSchemaBuilder(db).hasTable('idlease_workers')).toBe(false);
    expect((await migrate(db.knex, { segments: false, workers: true })).applied).toEqual([
      'workers:idlease_workers',
      'workers:idlease_workers:v2',
    ]);
    expect((await migrate(db.knex, { segments: false, workers: true, direction: 'down' })).applied).toEqual([
      'workers:idlease_workers:v2',
      'workers:idlease_workers',
    ]);
    expect(await ownSchemaBuilder(db).hasTable('idlease_workers')).toBe(false);
    expect(await ownSchemaBuilder(db).hasTable('idlease_workers_instance')).toBe(false);
    expect((await migrate(db.knex, { segments: false, workers: true })).applied).toEqual([
      'workers:idlease_workers',
      'workers:idlease_workers:v2',
    ]);
    expect(await ownSchemaBuilder(db).hasTable('idlease_workers_instance')).toBe(true);
  });

  it('claims the lowest free id, none past the last, renews and releases only with its own token', async () => {
    const holders = [newHolder(), newHolder(), newHolder(), newHolder(), newHolder()];
    const got = [];
    for (const h of holders.slice(0, 4)) got.push(await store.claim('a', 3, h, 60_000));
    expect(got.map((c) => c?.workerId)).toEqual([0, 1, 2, 3]);
    expect(got.every((c) => c?.maxTimeMs === 0n)).toBe(true);
    expect(await store.claim('a', 3, holders[4]!, 60_000)).toBeUndefined();
    // Another group has its own ids.
    expect((await store.claim('b', 3, newHolder(), 60_000))?.workerId).toBe(0);
    expect(await store.renew('a', 1, holders[0]!.token, 60_000, 5n)).toBe(false);
    expect(await store.renew('a', 1, holders[1]!.token, 60_000, 12_345n)).toBe(true);
    expect(await store.release('a', 1, holders[0]!.token, 1n)).toBe(false);
    expect(await store.renew('a', 1, holders[1]!.token, 60_000, 100n)).toBe(true);
    expect((await store.list('a'))[1]!.maxTimeMs).toBe(12_345n);
    // Release records the highest time actually used; the next holder of id 1 learns it.
    expect(await store.release('a', 1, holders[1]!.token, 12_000n)).toBe(true);
    expect(await store.claim('a', 3, holders[4]!, 60_000)).toMatchObject({ workerId: 1, maxTimeMs: 12_000n });
    // The old holder's token no longer renews it.
    expect(await store.renew('a', 1, holders[1]!.token, 60_000, 1n)).toBe(false);
    const rows = await store.list('a');
    expect(rows.map((r) => [r.workerId, r.alive, r.pid])).toEqual([
      [0, true, process.pid],
      [1, true, process.pid],
      [2, true, process.pid],
      [3, true, process.pid],
    ]);
  });

  it('a claim reports the instance it ran on and the one the marker names: a fresh install is marked; markInstance marks only the instance it runs on', async () => {
    const marker = flavor === 'mysql' ? 'idlease_workers_instance' : 'idlease.idlease_workers_instance';
    const fresh = await store.claim('inst', 3, newHolder(), 60_000);
    if (flavor === 'pglite') {
      // One process per directory and no replication: PGlite claims report no instance and never wait.
      expect(fresh).toEqual({ workerId: 0, maxTimeMs: 0n });
      return;
    }
    expect(fresh?.instance).toMatch(flavor === 'mysql' ? /^mariadb:\d+:\d+$/ : /^pg:\d+:[0-9A-F]{8}$/);
    expect(fresh?.markedInstance).toBe(fresh?.instance);
    // As an install upgraded from before the marker (or a standby whose marker names the old primary).
    await db.knex.raw(`DELETE FROM ${marker}`);
    const unknown = await store.claim('inst', 3, newHolder(), 60_000);
    expect(unknown).toMatchObject({ instance: fresh?.instance, markedInstance: null });
    await store.markInstance!('pg:0:00000009');
    expect((await store.claim('inst', 3, newHolder(), 60_000))?.markedInstance).toBeNull();
    await store.markInstance!(fresh!.instance!);
    await store.markInstance!(fresh!.instance!);
    expect((await store.claim('inst', 3, newHolder(), 60_000))?.markedInstance).toBe(fresh?.instance);
  });

  it('an expired lease is taken over by the database clock; a live one is not', async () => {
    const a = newHolder();
    expect((await store.claim('exp', 0, a, 300))?.workerId).toBe(0);
    expect(await store.claim('exp', 0, newHolder(), 300)).toBeUndefined();
    await sleep(500);
    const b = newHolder();
    expect((await store.claim('exp', 0, b, 60_000))?.workerId).toBe(0);
    expect(await store.renew('exp', 0, a.token, 60_000, 1n)).toBe(false);
    // A lease that lapsed but that nobody took is still its holder's to renew.
    const c = newHolder();
    expect((await store.claim('lapse', 0, c, 200))?.workerId).toBe(0);
    await sleep(400);
    expect(await store.renew('lapse', 0, c.token, 60_000, 1n)).toBe(true);
  });
});

// PGlite is one in-process connection: there is no second connection to race on.
describe.each(['mysql', 'postgres'] as const)('worker-id claims racing on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'workers_race');
    await migrate(db.knex, { segments: false, workers: true });
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('claims racing on separate connections never share an id', async () => {
    const handles = [db.knex, db.another(), db.another(), db.another()];
    const stores = handles.map((k) => createKnexWorkerIdStore(k, REF));
    const results = await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        // Lost races come back empty: retry as the allocator does, until the 16 ids are gone.
        for (let attempt = 0; attempt < 50; attempt++) {
          const c = await stores[i % stores.length]!.claim('race', 15, newHolder(), 60_000).catch((e: unknown) => {
            if (/deadlock|Deadlock/.test(String((e as Error).message))) return null;
            throw e;
          });
          if (c) return c.workerId;
          const alive = (await stores[0]!.list('race')).filter((r) => r.alive).length;
          if (c === undefined && alive >= 16) return undefined;
        }
        throw new Error('claim kept losing');
      }),
    );
    const ids = results.filter((x): x is number => x !== undefined);
    expect(ids.length).toBe(16);
    expect(new Set(ids).size).toBe(16);
  });
});

describe('idlease migrate --workers', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'workers_cli');
  });
  afterAll(async () => {
    await db?.drop();
  });
  it('installs and removes the table', async () => {
    const up = await runCli(['--url', db.url, 'migrate', '--no-segments', '--workers', '--json']);
    expect(up.code, up.stderr).toBe(0);
    expect(JSON.parse(up.stdout).applied).toEqual(['workers:idlease_workers', 'workers:idlease_workers:v2']);
    expect(await ownSchemaBuilder(db).hasTable('idlease_workers')).toBe(true);
    const down = await runCli(['--url', db.url, 'migrate', '--no-segments', '--workers', '--down', '--json']);
    expect(down.code, down.stderr).toBe(0);
    expect(await ownSchemaBuilder(db).hasTable('idlease_workers')).toBe(false);
  });
});
