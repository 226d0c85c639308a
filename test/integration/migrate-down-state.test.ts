/**
 * A down migration never drops, unasked, the state that keeps IDs unique: segment rows that
 * have handed out IDs, ticket counters that have issued tickets, worker ids leased by running
 * processes. It refuses (MIGRATION_FAILED naming what would be lost and dropState) and drops
 * nothing — not even the other objects of the same call; with dropState it drops them. And an
 * `up` that names a ticket pair other than the installed one is refused, not "nothing to do".
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, bumpTag } from '../../src/segment/admin.js';
import { createSegmentAllocator } from '../../src/segment/allocator.js';
import { createTicketAllocator } from '../../src/ticket/allocator.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { createTestDb, ownSchemaBuilder, type TestDb } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';

describe.each(['mysql', 'postgres'] as const)('down migrations keep what guards uniqueness (%s)', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'down_state');
  });
  afterAll(async () => {
    await db?.drop();
  });

  const all = { workers: true, tickets: true } as const;
  const has = (t: string) => ownSchemaBuilder(db).hasTable(t);

  it('empty objects drop without the option', async () => {
    await migrate(db.knex, all);
    await addTag(db.knex, { tag: 'fresh' }); // max_id 0: nothing handed out yet
    const res = await migrate(db.knex, { ...all, direction: 'down' });
    expect(res.applied).toEqual([
      'workers:idlease_workers:v2',
      'workers:idlease_workers',
      'tickets:default:v2',
      'tickets:default',
      'install:idlease_install',
      ...(flavor === 'mysql' ? ['segments:idlease_segments:v3-nopad'] : []),
      'segments:idlease_segments:v3',
      'segments:idlease_segments:v2',
      'segments:idlease_segments',
    ]);
    expect(await has('idlease_segments')).toBe(false);
  });

  it('a tag that handed out IDs: refused, naming the tag, its max_id and the option; nothing dropped', async () => {
    await migrate(db.knex, all);
    await addTag(db.knex, { tag: 'order' });
    await bumpTag(db.knex, { tag: 'order', by: 1000 });
    await addTag(db.knex, { tag: 'unused' });
    const err = await migrate(db.knex, { ...all, direction: 'down' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'MIGRATION_FAILED' });
    const msg = (err as Error).message;
    expect(msg).toContain('order max_id 1000');
    expect(msg).not.toContain('unused');
    expect(msg).toContain('dropState: true');
    // Every refusal is asked before any drop: the workers table (empty) is still there too.
    expect(await has('idlease_segments')).toBe(true);
    expect(await has('idlease_workers')).toBe(true);
    await migrate(db.knex, { ...all, direction: 'down', dropState: true });
    expect(await has('idlease_segments')).toBe(false);
  });

  it('a ticket counter that issued tickets: refused with the last ticket; dropState drops it', async () => {
    await migrate(db.knex, { segments: false, tickets: true });
    const t = createTicketAllocator({ servers: [{ knex: db.knex, offset: 1 }], increment: 1 });
    const id = await t.next();
    await t.close();
    const err = await migrate(db.knex, { segments: false, tickets: true, direction: 'down' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'MIGRATION_FAILED' });
    expect((err as Error).message).toContain(`issued tickets up to ${id}`);
    const res = await migrate(db.knex, { segments: false, tickets: true, direction: 'down', dropState: true });
    expect(res.applied).toEqual(['tickets:default:v2', 'tickets:default']);
  });

  it('a live worker lease: refused naming the holder; after the holder closes it drops', async () => {
    await migrate(db.knex, { segments: false, workers: true });
    const sf = createSnowflakeAllocator({ knex: db.knex, group: 'live' });
    await sf.next();
    const err = await migrate(db.knex, { segments: false, workers: true, direction: 'down' }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'MIGRATION_FAILED' });
    expect((err as Error).message).toContain(`live/${sf.workerId} held by`);
    await sf.close(); // releases the lease
    const res = await migrate(db.knex, { segments: false, workers: true, direction: 'down' });
    expect(res.applied).toEqual(['workers:idlease_workers:v2', 'workers:idlease_workers']);
  });

  it('migrate --tickets naming another increment/offset than the installed one is refused (BAD_CONFIG), the same pair is a no-op', async () => {
    await migrate(db.knex, { segments: false, tickets: { increment: 2, offset: 1 } });
    await expect(migrate(db.knex, { segments: false, tickets: { increment: 3, offset: 2 } })).rejects.toMatchObject({
      code: 'BAD_CONFIG',
      message: expect.stringContaining('already serves offset 1 of increment 2'),
    });
    expect((await migrate(db.knex, { segments: false, tickets: { increment: 2, offset: 1 } })).applied).toEqual([]);
    expect((await migrate(db.knex, { segments: false, tickets: true })).applied).toEqual([]);
    await migrate(db.knex, { segments: false, tickets: true, direction: 'down', dropState: true });
  });

  it('CLI: migrate --down refuses with --drop-state named in CLI words (exit 2); --drop-state drops', async () => {
    await migrate(db.knex);
    const alloc = createSegmentAllocator({ knex: db.knex, tag: 'cli', create: {} });
    await alloc.next();
    await alloc.close();
    const refused = await runCli(['--url', db.url, 'migrate', '--down']);
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr).toMatch(
      /^idlease: MIGRATION_FAILED: Refusing to drop the segment table [^\n]*cli max_id \d+[^\n]*--drop-state[^\n]*\n$/,
    );
    expect(refused.stderr).not.toContain('dropState');
    expect(await has('idlease_segments')).toBe(true);
    const pair = await runCli([
      '--url',
      db.url,
      'migrate',
      '--no-segments',
      '--tickets',
      '--tickets-increment',
      '2',
      '--tickets-offset',
      '2',
    ]);
    expect(pair.code, pair.stderr).toBe(0);
    const changed = await runCli([
      '--url',
      db.url,
      'migrate',
      '--no-segments',
      '--tickets',
      '--tickets-increment',
      '3',
      '--tickets-offset',
      '2',
    ]);
    expect(changed.code, changed.stderr).toBe(2);
    expect(changed.stderr).toMatch(/^idlease: BAD_CONFIG: [^\n]*idlease tickets reshard[^\n]*\n$/);
    const dropped = await runCli(['--url', db.url, 'migrate', '--down', '--drop-state']);
    expect(dropped.code, dropped.stderr).toBe(0);
    expect(await has('idlease_segments')).toBe(false);
  });
});
