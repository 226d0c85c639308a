/**
 * Ticket allocator on private MariaDB instances (2 and 3 servers): round-robin, a server
 * SIGKILLed mid-run, misconfiguration refused, IDs past 2^53, and a reshard 2 → 3 while
 * IDs are being drawn. Each server starts with a deliberately wrong my.cnf pair
 * (--auto-increment-increment=7): the allocator sets the pair per session.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createTicketAllocator, reshardTickets, type TicketAllocator } from '../../src/ticket/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { startMariadb, type ServerInstance } from '../helpers/servers.js';

const instances: ServerInstance[] = [];
const handles: Knex[] = [];

function open(inst: ServerInstance): Knex {
  const k = connect(inst.url, { poolMax: 4 });
  handles.push(k);
  return k;
}

async function drawMany(alloc: TicketAllocator, callers: number, each: number): Promise<{ ids: bigint[]; failures: unknown[] }> {
  const ids: bigint[] = [];
  const failures: unknown[] = [];
  await Promise.all(
    Array.from({ length: callers }, async () => {
      for (let i = 0; i < each; i++) {
        try {
          ids.push(await alloc.next());
        } catch (err) {
          failures.push(err);
        }
      }
    }),
  );
  return { ids, failures };
}

function expectUnique(ids: bigint[]): void {
  expect(new Set(ids.map(String)).size).toBe(ids.length);
}

let a: Knex, b: Knex, c: Knex;
let instA: ServerInstance, instB: ServerInstance, instC: ServerInstance;

beforeAll(async () => {
  [instA, instB, instC] = (await Promise.all(
    [1, 2, 3].map(() => startMariadb(['--auto-increment-increment=7', '--auto-increment-offset=3'])),
  )) as [ServerInstance, ServerInstance, ServerInstance];
  instances.push(instA, instB, instC);
  [a, b, c] = [instA, instB, instC].map(open) as [Knex, Knex, Knex];
  await migrate(a, { segments: false, tickets: { increment: 2, offset: 1 } });
  await migrate(b, { segments: false, tickets: { increment: 2, offset: 2, engine: 'MyISAM' } });
  await migrate(c, { segments: false, tickets: { sequences: ['default', 'big'] } });
});

afterAll(async () => {
  await Promise.all(handles.map((h) => h.destroy().catch(() => undefined)));
  await Promise.all(instances.map((i) => i.destroy()));
});

describe('ticket allocator on 2 MariaDB servers', () => {
  it('alternates servers round-robin, each ID in its server’s residue class', async () => {
    const alloc = createTicketAllocator({
      servers: [
        { knex: a, offset: 1 },
        { knex: b, offset: 2 },
      ],
    });
    try {
      const ids: bigint[] = [];
      for (let i = 0; i < 20; i++) ids.push(await alloc.next());
      expectUnique(ids);
      const odd = ids.filter((id) => id % 2n === 1n).length;
      expect(odd).toBe(10);
      for (let i = 1; i < ids.length; i++) expect(ids[i]! % 2n).not.toBe(ids[i - 1]! % 2n);
      for (const id of ids) expect(typeof id).toBe('bigint');
      const st = await alloc.status();
      expect(st.map((s) => [s.offset, s.increment, s.health])).toEqual([
        [1, 2, 'up'],
        [2, 2, 'up'],
      ]);
      expect(st[0]!.server?.engine).toBe('InnoDB');
      expect(st[1]!.server?.engine).toBe('MyISAM');
      expect(st[0]!.server?.sessionIncrement).toBe(2);
      expect(st[1]!.server?.sessionOffset).toBe(2);
      // my.cnf says 3 of 7; idlease's sessions override it.
      expect([st[0]!.server?.globalOffset, st[0]!.server?.globalIncrement]).toEqual([3, 7]);
    } finally {
      await alloc.close();
    }
  });

  it('refuses bad server sets at startup with BAD_CONFIG', () => {
    const bad = [
      {
        servers: [
          { knex: a, offset: 1 },
          { knex: b, offset: 1 },
        ],
      },
      {
        servers: [
          { knex: a, offset: 1 },
          { knex: b, offset: 3 },
        ],
        increment: 2,
      },
      {
        servers: [
          { knex: a, offset: 1 },
          { knex: b, offset: 2 },
        ],
        increment: 1,
      },
      { servers: [] },
    ];
    for (const opts of bad) {
      expect(() => createTicketAllocator(opts)).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
    }
  });

  it('refuses a server whose scheme disagrees with the options', async () => {
    // b serves offset 2 of 2; claiming offset 1 of 3 for it must be refused, not drawn from.
    const alloc = createTicketAllocator({ servers: [{ knex: b, offset: 1 }], increment: 3 });
    try {
      await expect(alloc.ready()).rejects.toMatchObject({ code: 'BAD_CONFIG' });
      await expect(alloc.next()).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    } finally {
      await alloc.close();
    }
  });

  it('a server SIGKILLed mid-run: zero failed next() calls, zero duplicates, and it is probed back in', async () => {
    const alloc = createTicketAllocator({
      servers: [
        { knex: a, offset: 1 },
        { knex: b, offset: 2 },
      ],
      backoffInitialMs: 50,
      backoffMaxMs: 200,
    });
    // A second allocator with its own connections stands in for another process.
    const other = createTicketAllocator({
      servers: [
        { knex: a, offset: 1 },
        { knex: b, offset: 2 },
      ],
      backoffInitialMs: 50,
      backoffMaxMs: 200,
    });
    try {
      const run = drawMany(alloc, 8, 150);
      const run2 = drawMany(other, 4, 150);
      await new Promise((r) => setTimeout(r, 150));
      await instA.kill();
      const { ids, failures } = await run;
      const second = await run2;
      expect(failures).toEqual([]);
      expect(second.failures).toEqual([]);
      expect(ids.length).toBe(1200);
      expectUnique([...ids, ...second.ids]);
      const st = await alloc.status();
      expect(st[0]!.health).toBe('down');
      await instA.start();
      const deadline = Date.now() + 20_000;
      while ((await alloc.status())[0]!.health !== 'up' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      const after = await drawMany(alloc, 4, 10);
      expect(after.failures).toEqual([]);
      expect(after.ids.some((id) => id % 2n === 1n)).toBe(true);
      expectUnique([...ids, ...second.ids, ...after.ids]);
    } finally {
      await alloc.close();
      await other.close();
    }
  });

  it('a server that stops answering (tables locked) times out, leaves the rotation, and comes back', async () => {
    const locker = connect(instB.url, { poolMax: 1 });
    handles.push(locker);
    const alloc = createTicketAllocator({
      servers: [
        { knex: a, offset: 1 },
        { knex: b, offset: 2 },
      ],
      statementTimeoutMs: 300,
      backoffInitialMs: 100,
      backoffMaxMs: 200,
    });
    try {
      await alloc.ready();
      await locker.raw('LOCK TABLES idlease_ticket_schemes WRITE');
      const { ids, failures } = await drawMany(alloc, 4, 20);
      expect(failures).toEqual([]);
      expectUnique(ids);
      expect((await alloc.status())[1]!.health).toBe('down');
      await locker.raw('UNLOCK TABLES');
      const deadline = Date.now() + 10_000;
      while ((await alloc.status())[1]!.health !== 'up' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      const after = await drawMany(alloc, 2, 10);
      expect(after.failures).toEqual([]);
      expect(after.ids.some((id) => id % 2n === 0n)).toBe(true);
      expectUnique([...ids, ...after.ids]);
    } finally {
      await locker.raw('UNLOCK TABLES').catch(() => undefined);
      await alloc.close();
    }
  });

  it('all servers down → DB_UNAVAILABLE within the bound', async () => {
    const dead = connect('mysql://root@127.0.0.1:1/test');
    handles.push(dead);
    const alloc = createTicketAllocator({ servers: [{ knex: dead, offset: 1 }], timeoutMs: 800, statementTimeoutMs: 300 });
    try {
      const t0 = Date.now();
      const err = await alloc.next().catch((e: unknown) => e);
      expect(isIdleaseError(err, 'DB_UNAVAILABLE')).toBe(true);
      expect(Date.now() - t0).toBeLessThan(5000);
      // A call waiting for a server ends with CLOSED when the allocator is closed.
      const patient = createTicketAllocator({ servers: [{ knex: dead, offset: 1 }], timeoutMs: 60_000, statementTimeoutMs: 300 });
      const waiting = patient.next().catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 400));
      await patient.close();
      expect(isIdleaseError(await waiting, 'CLOSED')).toBe(true);
      await expect(patient.next()).rejects.toMatchObject({ code: 'CLOSED' });
    } finally {
      await alloc.close();
    }
  });
});

describe('ticket allocator past 2^53 and reshard to 3 servers', () => {
  it('IDs above 2^53 come back exact', async () => {
    // `big` on c is offset 1 of 1; start it just past 2^53 and near 2^63.
    await c.raw('ALTER TABLE idlease_tickets_big AUTO_INCREMENT = 9007199254740993');
    const alloc = createTicketAllocator({ servers: [{ knex: c, offset: 1 }], sequence: 'big' });
    try {
      expect(await alloc.next()).toBe(9007199254740993n);
      expect(await alloc.next()).toBe(9007199254740994n);
      await c.raw('ALTER TABLE idlease_tickets_big AUTO_INCREMENT = 9223372036854775806');
      expect(await alloc.next()).toBe(9223372036854775806n);
      expect(await alloc.next()).toBe(9223372036854775807n);
      // Past 2^63-1 the unsigned column would go on; idlease refuses (never wraps, sign bit clear).
      await expect(alloc.next()).rejects.toMatchObject({ code: 'EXHAUSTED' });
    } finally {
      await alloc.close();
    }
  });

  it('reshard 2 → 3 while IDs are drawn: no duplicates, no failed calls, every ID in its class', async () => {
    const old = createTicketAllocator({
      servers: [
        { knex: a, offset: 1 },
        { knex: b, offset: 2 },
      ],
      timeoutMs: 10_000,
    });
    const before = await drawMany(old, 4, 20);
    expect(before.failures).toEqual([]);
    const during = drawMany(old, 6, 100);
    await new Promise((r) => setTimeout(r, 50));
    const result = await reshardTickets({
      servers: [
        { knex: a, offset: 1 },
        { knex: b, offset: 2 },
        { knex: c, offset: 3 },
      ],
    });
    const maxBefore = before.ids.reduce((m, x) => (x > m ? x : m), 0n);
    expect(result.globalMax >= maxBefore).toBe(true);
    const grown = createTicketAllocator({
      servers: [
        { knex: a, offset: 1 },
        { knex: b, offset: 2 },
        { knex: c, offset: 3 },
      ],
    });
    try {
      const parallel = await drawMany(grown, 6, 50);
      const d = await during;
      expect(d.failures).toEqual([]);
      expect(parallel.failures).toEqual([]);
      const all = [...before.ids, ...d.ids, ...parallel.ids];
      expectUnique(all);
      for (const id of parallel.ids) expect(id > result.globalMax).toBe(true);
      // The race was real: the old allocator drew on both sides of the reshard.
      expect(d.ids.some((id) => id <= result.globalMax)).toBe(true);
      expect(d.ids.some((id) => id > result.globalMax)).toBe(true);
      const st = await grown.status();
      expect(st.map((s) => [s.offset, s.increment])).toEqual([
        [1, 3],
        [2, 3],
        [3, 3],
      ]);
      // Round-robin over 3 servers: each class gets a third of the calls.
      for (const r of [0n, 1n, 2n]) expect(parallel.ids.filter((id) => id % 3n === r).length).toBeGreaterThanOrEqual(90);
      // The old allocator followed the servers to their new pairs: what it drew after the
      // reshard is in a's and b's new residue classes (1 and 2 mod 3).
      for (const id of d.ids.filter((x) => x > result.globalMax)) expect([1n, 2n]).toContain(id % 3n);
      const oldSt = await old.status();
      expect(oldSt.map((s) => s.server?.scheme.increment)).toEqual([3, 3]);
    } finally {
      await old.close();
      await grown.close();
    }
  });
});
