/** The same ticket API on PostgreSQL sequences (shared server) and PGlite. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createTicketAllocator, reshardTickets } from '../../src/ticket/index.js';

describe.each(['postgres', 'pglite'] as const)('tickets on %s sequences', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'tickets');
    await migrate(db.knex, { segments: false, tickets: { sequences: ['default', 'big'], increment: 4, offset: 3 } });
  });
  afterAll(async () => {
    await db.drop();
  });

  it('draws IDs ≡ offset (mod increment), unique, as bigint', async () => {
    const alloc = createTicketAllocator({ servers: [{ knex: db.knex, offset: 3 }], increment: 4 });
    try {
      const ids = await Promise.all(Array.from({ length: 50 }, () => alloc.next()));
      expect(new Set(ids.map(String)).size).toBe(50);
      for (const id of ids) {
        expect(typeof id).toBe('bigint');
        expect(id % 4n).toBe(3n);
      }
      const [st] = await alloc.status();
      expect(st!.server?.engine).toBe('sequence');
      expect(st!.server?.scheme.increment).toBe(4);
      expect(st!.server?.lastId).toBe(ids.reduce((m, x) => (x > m ? x : m)));
    } finally {
      await alloc.close();
    }
  });

  it('refuses options that disagree with the sequence', async () => {
    const alloc = createTicketAllocator({ servers: [{ knex: db.knex, offset: 1 }], increment: 4 });
    try {
      await expect(alloc.next()).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    } finally {
      await alloc.close();
    }
  });

  it('reshard moves the sequence above the maximum under the new pair; IDs past 2^53 exact', async () => {
    const before = createTicketAllocator({ servers: [{ knex: db.knex, offset: 1 }], increment: 1, sequence: 'big' });
    await expect(before.next()).rejects.toMatchObject({ code: 'BAD_CONFIG' }); // migrated as 3 of 4
    await before.close();
    await db.knex.raw(`SELECT setval('idlease.idlease_tickets_big', 9007199254740991)`);
    // Migrated as offset 3 of 4 and resharded alone: the other offsets of 4 have no server here, said so.
    await expect(reshardTickets({ servers: [{ knex: db.knex, offset: 2 }], increment: 5, sequence: 'big' })).rejects.toMatchObject({
      code: 'BAD_ARGUMENT',
      message: expect.stringMatching(
        /no server named here serves offset 1 of increment 4, offset 2 of increment 4, offset 4 of increment 4/,
      ),
    });
    const r = await reshardTickets({ servers: [{ knex: db.knex, offset: 2 }], increment: 5, sequence: 'big', vacantOffsets: [1, 2, 4] });
    expect(r.globalMax).toBe(9007199254740991n);
    expect(r.servers[0]!.firstId).toBe(9007199254740992n);
    const alloc = createTicketAllocator({ servers: [{ knex: db.knex, offset: 2 }], increment: 5, sequence: 'big' });
    try {
      expect(await alloc.next()).toBe(9007199254740992n);
      expect(await alloc.next()).toBe(9007199254740997n);
      // At the top of bigint the sequence stops: EXHAUSTED, never a wrap.
      await db.knex.raw(`SELECT setval('idlease.idlease_tickets_big', 9223372036854775802)`);
      expect(await alloc.next()).toBe(9223372036854775807n);
      await expect(alloc.next()).rejects.toMatchObject({ code: 'EXHAUSTED' });
    } finally {
      await alloc.close();
    }
  });
});

describe.each(['postgres', 'pglite'] as const)('ticket reshard with a margin (failover repair) on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'tickmargin');
    await migrate(db.knex, { segments: false, tickets: { increment: 2, offset: 1 } });
  });
  afterAll(async () => {
    await db.drop();
  });

  it('the same server set, reopened a margin above the maximum: the next ID clears every draw the margin covers', async () => {
    const alloc = createTicketAllocator({ servers: [{ knex: db.knex, offset: 1 }], increment: 2 });
    try {
      const last = (await Promise.all(Array.from({ length: 10 }, () => alloc.next()))).reduce((m, x) => (x > m ? x : m));
      const r = await reshardTickets({ servers: [{ knex: db.knex, offset: 1 }], increment: 2, margin: 1_000_000n });
      expect(r.globalMax).toBe(last);
      expect(r.servers[0]!.firstId).toBe(last + 1_000_002n); // the first ID ≡ 1 (mod 2) above last + margin
      expect(await alloc.next()).toBe(last + 1_000_002n);
      await expect(reshardTickets({ servers: [{ knex: db.knex, offset: 1 }], increment: 2, margin: -1 })).rejects.toMatchObject({
        code: 'BAD_ARGUMENT',
      });
    } finally {
      await alloc.close();
    }
  });
});

describe.each(['postgres', 'pglite'] as const)('two reshards in a row with no draw between on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'tickretwice');
    await migrate(db.knex, { segments: false, tickets: { sequences: ['twice'] } });
  });
  afterAll(async () => {
    await db.drop();
  });

  it('the second starts above what the server issued before the first (a restarted sequence is not read as empty)', async () => {
    const alloc = createTicketAllocator({ servers: [{ knex: db.knex, offset: 1 }], sequence: 'twice' });
    try {
      const before: bigint[] = [];
      for (let i = 0; i < 10; i++) before.push(await alloc.next());
      const first = await reshardTickets({ servers: [{ knex: db.knex, offset: 1 }], increment: 2, sequence: 'twice' });
      expect(first.globalMax).toBe(10n);
      // Retried, or grown again, before anyone drew: the sequence was restarted at 11 and not called since.
      const second = await reshardTickets({ servers: [{ knex: db.knex, offset: 2 }], increment: 3, sequence: 'twice', vacantOffsets: [2] });
      expect(second.globalMax).toBeGreaterThanOrEqual(10n);
      const after = createTicketAllocator({ servers: [{ knex: db.knex, offset: 2 }], increment: 3, sequence: 'twice' });
      try {
        const next = await after.next();
        expect(next > 10n, String(next)).toBe(true);
      } finally {
        await after.close();
      }
    } finally {
      await alloc.close();
    }
  });
});

describe('tickets on two PostgreSQL databases as two servers', () => {
  let one: TestDb;
  let two: TestDb;
  beforeAll(async () => {
    [one, two] = await Promise.all([createTestDb('postgres', 'tick_a'), createTestDb('postgres', 'tick_b')]);
    await migrate(one.knex, { segments: false, tickets: { increment: 2, offset: 1 } });
    await migrate(two.knex, { segments: false, tickets: { increment: 2, offset: 2 } });
  });
  afterAll(async () => {
    await Promise.all([one.drop(), two.drop()]);
  });

  it('round-robin, and a reshard to increment 3 while 6 callers draw: no failure, no duplicate', async () => {
    const alloc = createTicketAllocator({
      servers: [
        { knex: one.knex, offset: 1 },
        { knex: two.knex, offset: 2 },
      ],
      timeoutMs: 10_000,
    });
    try {
      const first = [await alloc.next(), await alloc.next(), await alloc.next(), await alloc.next()];
      expect(first.map((x) => x % 2n)).toEqual([1n, 0n, 1n, 0n]);
      const ids: bigint[] = [...first];
      const failures: unknown[] = [];
      const callers = Array.from({ length: 6 }, async () => {
        for (let i = 0; i < 60; i++)
          await alloc.next().then(
            (id) => ids.push(id),
            (e: unknown) => failures.push(e),
          );
      });
      await new Promise((r) => setTimeout(r, 30));
      const r = await reshardTickets({
        servers: [
          { knex: one.knex, offset: 1 },
          { knex: two.knex, offset: 3 },
        ],
        increment: 3,
      });
      await Promise.all(callers);
      expect(failures).toEqual([]);
      expect(new Set(ids.map(String)).size).toBe(ids.length);
      // A server the reshard closed may still be in its probe backoff: draw until both new
      // classes have been seen (bounded), rather than assume the next two calls alternate.
      const after: bigint[] = [];
      const deadline = Date.now() + 10_000;
      while (new Set(after.map((x) => x % 3n)).size < 2 && Date.now() < deadline) {
        after.push(await alloc.next());
        await new Promise((res) => setTimeout(res, 20));
      }
      for (const id of after) expect(id > r.globalMax).toBe(true);
      for (const id of after) expect([0n, 1n]).toContain(id % 3n);
      expect(new Set(after.map((x) => x % 3n))).toEqual(new Set([0n, 1n]));
      expect(new Set([...ids, ...after].map(String)).size).toBe(ids.length + after.length);
    } finally {
      await alloc.close();
    }
  });
});
