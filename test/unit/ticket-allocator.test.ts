/**
 * The ticket allocator on in-memory servers (no database): failover, a down server skipped
 * until its backoff ends and probed back in, lock conflicts, every server down, a bounded
 * close() while a draw hangs, and uniqueness across servers, allocators, faults and reshards.
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { createTicketAllocator, type TicketAllocator, type TicketAllocatorOptions, type TicketEvent } from '../../src/ticket/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { createFakeClock } from './fake-clock.js';
import { MemoryTicketServer, reshardMemory } from './ticket-memory-source.js';
import { waitFor } from '../helpers/wait.js';

const open: TicketAllocator[] = [];

function allocator(
  servers: MemoryTicketServer[],
  options: Partial<TicketAllocatorOptions> = {},
): { alloc: TicketAllocator; events: TicketEvent[] } {
  const events: TicketEvent[] = [];
  const alloc = createTicketAllocator({
    servers: servers.map((s) => ({ source: s.source(), offset: s.scheme.offset })),
    increment: servers[0]!.scheme.increment,
    backoffInitialMs: 5,
    backoffMaxMs: 20,
    onEvent: (e) => events.push(e),
    ...options,
  });
  open.push(alloc);
  return { alloc, events };
}

function pair(down = false): [MemoryTicketServer, MemoryTicketServer] {
  const servers: [MemoryTicketServer, MemoryTicketServer] = [new MemoryTicketServer(2, 1), new MemoryTicketServer(2, 2)];
  for (const s of servers) s.down = down;
  return servers;
}

async function drawN(alloc: TicketAllocator, n: number): Promise<bigint[]> {
  const ids: bigint[] = [];
  for (let i = 0; i < n; i++) ids.push(await alloc.next());
  return ids;
}

afterEach(async () => {
  await Promise.all(open.splice(0).map((a) => a.close()));
});

describe('ticket allocator on in-memory servers', () => {
  it('round-robin over the servers, each ID in its server’s class', async () => {
    const [a, b] = pair();
    const { alloc } = allocator([a, b]);
    const ids = await drawN(alloc, 10);
    expect(ids).toEqual([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n, 9n, 10n]);
    expect(alloc.stats().servers.map((s) => [s.name, s.served, s.lastIssued])).toEqual([
      ['server1', 5, 9n],
      ['server2', 5, 10n],
    ]);
  });

  it('fails over to the next server within the call: no failed next(), the server named down', async () => {
    const [a, b] = pair();
    const { alloc, events } = allocator([a, b]);
    await drawN(alloc, 2);
    a.down = true;
    const ids = await drawN(alloc, 6);
    expect(ids.every((id) => id % 2n === 0n)).toBe(true);
    expect(alloc.stats().servers[0]!.health).toBe('down');
    expect(events.filter((e) => e.type === 'server-down')).toEqual([
      expect.objectContaining({ server: 'server1', health: 'down', problem: 'unreachable' }),
    ]);
  });

  it('skips a down server until its backoff ends, then probes it back in (hand-driven clock)', async () => {
    const clock = createFakeClock(Date.UTC(2030, 0, 1));
    const [a, b] = pair();
    const { alloc, events } = allocator([a, b], { clock, backoffInitialMs: 1000, backoffMaxMs: 1000 });
    a.down = true;
    await alloc.next(); // a fails, b answers
    const drawsOnA = a.draws;
    await clock.advance(600); // inside the backoff (1000 ms ± 25 %)
    expect(await drawN(alloc, 4)).toSatisfy((ids: bigint[]) => ids.every((id) => id % 2n === 0n));
    expect([a.draws, a.probes]).toEqual([drawsOnA, 0]);
    expect(alloc.stats().servers[0]!.lastErrorAt).toBe(Date.UTC(2030, 0, 1));
    a.down = false;
    await clock.advance(700); // past it: one probe, and a is back
    await waitFor(() => alloc.stats().servers[0]!.health === 'up', { timeoutMs: 2000, intervalMs: 2, what: 'server 0 back up' });
    expect(a.probes).toBe(1);
    expect(events.map((e) => e.type)).toEqual(['server-down', 'server-up']);
    const ids = await drawN(alloc, 4);
    expect(ids.filter((id) => id % 2n === 1n)).toHaveLength(2);
  });

  it('a probe that fails backs off further; the server stays out until it answers', async () => {
    const [a, b] = pair();
    const { alloc } = allocator([a, b], { backoffInitialMs: 5, backoffMaxMs: 40 });
    a.down = true;
    await alloc.next();
    await waitFor(() => alloc.stats().servers[0]!.failures >= 4, { timeoutMs: 2000, intervalMs: 2, what: 'server 0 to fail 4 times' }); // the draw, then three probes
    expect(alloc.stats().servers[0]!.health).toBe('down');
    a.down = false;
    await waitFor(() => alloc.stats().servers[0]!.health === 'up', { timeoutMs: 2000, intervalMs: 2, what: 'server 0 back up' });
    expect(alloc.stats().servers[0]!.failures).toBe(0);
  });

  it('retries lock conflicts on the same server, then moves on; a contended server stays up', async () => {
    const [a, b] = pair();
    const { alloc } = allocator([a, b], { lockRetries: 4 });
    a.conflicts = 3;
    expect(await alloc.next()).toBe(1n); // retried on a
    a.conflicts = 100;
    expect(await alloc.next()).toBe(2n); // b, as round-robin says
    expect(await alloc.next()).toBe(4n); // a gave up after 4 retries: b again
    const [sa] = alloc.stats().servers;
    expect(sa).toMatchObject({ health: 'up', lockConflicts: 3 + 5, failures: 0 });
  });

  it('every server down: DB_UNAVAILABLE within timeoutMs, naming each server, counted and emitted', async () => {
    const [a, b] = pair(true);
    const { alloc, events } = allocator([a, b], { timeoutMs: 200 });
    const t0 = Date.now();
    const err = await alloc.next().catch((e: unknown) => e);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(isIdleaseError(err, 'DB_UNAVAILABLE')).toBe(true);
    expect((err as Error).message).toMatch(
      /^No ticket server produced an ID within 200 ms \(server1: down — connect ECONNREFUSED .*; server2: down — .*\)\. Check the servers \(idlease tickets status\) or raise timeoutMs\.$/,
    );
    expect((err as { cli?: { message: string } }).cli?.message).toMatch(/within 0.2 s .*--wait <seconds> waits longer/);
    expect(alloc.stats().timeouts).toBe(1);
    expect(events.at(-1)).toEqual({ type: 'timeout', error: err });
  });

  it('a call waiting for a server is answered when one comes back', async () => {
    const [a, b] = pair(true);
    const { alloc } = allocator([a, b], { timeoutMs: 5000 });
    const pending = alloc.next();
    await waitFor(() => a.probes > 0 && b.probes > 0, { timeoutMs: 2000, intervalMs: 2, what: 'a probe on each server' });
    b.down = false;
    expect(await pending).toBe(2n);
  });

  it('unmigrated everywhere: NOT_MIGRATED at once, named, not after timeoutMs', async () => {
    const servers = pair();
    for (const s of servers) s.notMigrated = true;
    const [a, b] = servers;
    const { alloc } = allocator([a, b], { timeoutMs: 60_000 });
    const t0 = Date.now();
    await expect(alloc.next()).rejects.toMatchObject({ code: 'NOT_MIGRATED', message: expect.stringMatching(/^server1: /) });
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(alloc.stats().servers.map((s) => s.health)).toEqual(['refused', 'refused']);
  });

  it('options that cannot work are BAD_CONFIG at construction, naming the option', () => {
    const a = new MemoryTicketServer(1, 1);
    const bad =
      (servers: unknown, extra: object = {}) =>
      () =>
        createTicketAllocator({ servers, ...extra } as never);
    expect(bad([{ source: {}, offset: 1 }])).toThrow(
      expect.objectContaining({
        code: 'BAD_CONFIG',
        message: expect.stringMatching(/servers\[0\]\.source must be a TicketSource .*no draw, readScheme, facts, probe, close/),
      }),
    );
    expect(bad([{ source: a.source(), pool: {}, offset: 1 }])).toThrow(
      expect.objectContaining({ code: 'BAD_CONFIG', message: 'servers[0] has both pool and source: give one.' }),
    );
    expect(bad([{ source: a.source(), offset: 1 }], { clock: {} })).toThrow(
      expect.objectContaining({ code: 'BAD_CONFIG', message: expect.stringMatching(/^clock must be/) }),
    );
    expect(bad([{ source: a.source(), offset: 1 }], { timeoutMs: 0 })).toThrow(
      expect.objectContaining({
        code: 'BAD_CONFIG',
        message: expect.stringMatching(/^timeoutMs must be an integer of at least 1, got 0\. Example: timeoutMs: 5000\./),
      }),
    );
  });

  it('a scheme that disagrees with the options is refused: ready() and next() say BAD_CONFIG', async () => {
    const a = new MemoryTicketServer(3, 2);
    const { alloc } = allocator([a], { increment: 3, servers: [{ source: a.source(), offset: 1 }] });
    await expect(alloc.ready()).rejects.toMatchObject({
      code: 'BAD_CONFIG',
      message: expect.stringMatching(/serves offset 2 of increment 3/),
    });
    await expect(alloc.next()).rejects.toMatchObject({ code: 'BAD_CONFIG' });
    expect(a.draws).toBe(0);
  });

  it('an ID outside the server’s class is never handed out: INVARIANT, the server refused, the others serve', async () => {
    const [a, b] = pair();
    a.counterPair = { increment: 1, offset: 1 }; // the counter ignores the pair (Galera)
    a.last = 1n;
    const { alloc, events } = allocator([a, b]);
    const ids = await drawN(alloc, 4);
    expect(ids).toEqual([2n, 4n, 6n, 8n]);
    expect(a.issued).toEqual([2n]); // drawn, refused, never returned
    expect(events[0]).toMatchObject({
      type: 'server-down',
      server: 'server1',
      health: 'refused',
      error: expect.objectContaining({ code: 'INVARIANT' }),
    });
    // Its probe answers, so it flaps between refused and up: whatever it hands out is checked.
    await waitFor(() => alloc.stats().servers[0]!.health === 'up', { timeoutMs: 2000, intervalMs: 2, what: 'server 0 back up' });
    const all = [...ids, ...(await drawN(alloc, 40))];
    expect(new Set(all).size).toBe(all.length);
    expect(all.every((id) => b.issued.includes(id) || id % 2n === 1n)).toBe(true);
    expect(a.issued.filter((id) => id % 2n === 0n).length).toBeGreaterThan(1);
  });

  it('close() is bounded while a draw hangs and the source will not close; the call ends CLOSED', async () => {
    const server = new MemoryTicketServer(1, 1);
    server.hanging = true;
    server.closeHangs = true;
    const { alloc } = allocator([server], { statementTimeoutMs: 300, timeoutMs: 60_000, closeTimeoutMs: 100 });
    const pending = alloc.next().catch((e: unknown) => e);
    await waitFor(() => server.draws + server.probes > 0, { timeoutMs: 2000, intervalMs: 2, what: 'a draw or a probe on the server' });
    const t0 = Date.now();
    await alloc.close();
    expect(Date.now() - t0).toBeLessThan(400);
    expect(isIdleaseError(await pending, 'CLOSED')).toBe(true);
    await expect(alloc.next()).rejects.toMatchObject({ code: 'CLOSED' });
    expect(alloc.stats().closed).toBe(true);
  });

  it('follows a reshard: draws fenced mid-way end in the new class, above the old maximum', async () => {
    const [a, b] = pair();
    const c = new MemoryTicketServer(3, 3);
    const { alloc } = allocator([a, b]);
    await drawN(alloc, 5);
    const max = reshardMemory(
      [
        { server: a, offset: 1 },
        { server: b, offset: 2 },
        { server: c, offset: 3 },
      ],
      3,
    );
    const after = await drawN(alloc, 6);
    expect(after.every((id) => id > max && [1n, 2n].includes(id % 3n))).toBe(true);
    expect(alloc.stats().servers.map((s) => [s.offset, s.increment])).toEqual([
      [1, 3],
      [2, 3],
    ]);
  });

  it('a reshard of some servers only: the allocator draws from neither scheme (BAD_CONFIG naming both), and follows once the whole set agrees', async () => {
    const three = [new MemoryTicketServer(3, 1), new MemoryTicketServer(3, 2), new MemoryTicketServer(3, 3)];
    const { alloc } = allocator(three, { timeoutMs: 200 });
    const before = await drawN(alloc, 30);
    // Two of three moved to increment 2 (issue 42): the third goes on serving offset 3 of 3.
    reshardMemory(
      [
        { server: three[0]!, offset: 1 },
        { server: three[1]!, offset: 2 },
      ],
      2,
    );
    const during: bigint[] = [];
    const refusals: unknown[] = [];
    for (let i = 0; i < 30; i++)
      await alloc.next().then(
        (id) => during.push(id),
        (err: unknown) => refusals.push(err),
      );
    // At most the draws of one round on the unmoved server go out before the moved one is seen.
    expect(during.length).toBeLessThanOrEqual(1);
    expect(during.every((id) => id % 3n === 0n)).toBe(true);
    expect(refusals.length).toBeGreaterThan(0);
    expect(refusals.every((e) => isIdleaseError(e, 'BAD_CONFIG'))).toBe(true);
    expect(String((refusals.at(-1) as Error).message)).toMatch(/mixed schemes .*offset 1 of increment 2.*offset 3 of increment 3/);
    const max = reshardMemory(
      three.map((server, i) => ({ server, offset: i + 1 })),
      4,
    );
    // Refused servers are probed back (backoff ≤ 20 ms) and the set moves as a whole.
    const deadline = Date.now() + 5_000;
    let after: bigint[] = [];
    while (after.length === 0 && Date.now() < deadline) {
      // A refused call ends in microtasks: yield to the timers that run the probes.
      await new Promise((r) => setTimeout(r, 5));
      after = await drawN(alloc, 6).catch(() => []);
    }
    expect(after).toHaveLength(6);
    expect(after.every((id) => id > max && [1n, 2n, 3n].includes(id % 4n))).toBe(true);
    const all = [...before, ...during, ...after];
    expect(new Set(all).size).toBe(all.length);
  });

  it('property: no ID twice across servers with interleaved offsets, several allocators, faults and reshards', async () => {
    const step = fc.oneof(
      fc.record({ kind: fc.constant('draw' as const), allocator: fc.nat(2), callers: fc.integer({ min: 1, max: 4 }) }),
      fc.record({ kind: fc.constant('down' as const), server: fc.nat(4), down: fc.boolean() }),
      fc.record({ kind: fc.constant('conflicts' as const), server: fc.nat(4), n: fc.integer({ min: 1, max: 15 }) }),
      fc.record({ kind: fc.constant('reshard' as const), extra: fc.nat(2), seed: fc.nat() }),
      // A counter that follows another pair (Galera's auto-increment control): classes overlap, the allocator's check must catch it.
      fc.record({ kind: fc.constant('stray' as const), server: fc.nat(4), increment: fc.integer({ min: 1, max: 3 }) }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.nat(3),
        fc.integer({ min: 1, max: 3 }),
        fc.array(step, { minLength: 1, maxLength: 12 }),
        fc.nat(),
        async (n, spare, allocators, steps, seed) => {
          let increment = n + spare;
          // Offsets: n distinct values of 1..increment, in a seed-chosen order.
          const offsets = shuffled(
            Array.from({ length: increment }, (_, i) => i + 1),
            seed,
          ).slice(0, n);
          const servers = offsets.map((off) => new MemoryTicketServer(increment, off));
          const allocs = Array.from({ length: allocators }, () =>
            createTicketAllocator({
              servers: servers.map((s) => ({ source: s.source(), offset: s.scheme.offset })),
              increment,
              timeoutMs: 50,
              statementTimeoutMs: 30,
              backoffInitialMs: 1,
              backoffMaxMs: 5,
              lockRetries: 3,
            }),
          );
          const handed: bigint[] = [];
          try {
            for (const st of steps) {
              if (st.kind === 'draw') {
                const alloc = allocs[st.allocator % allocs.length]!;
                await Promise.all(
                  Array.from({ length: st.callers }, () =>
                    alloc.next().then(
                      (id) => handed.push(id),
                      () => undefined,
                    ),
                  ),
                );
              } else if (st.kind === 'down') servers[st.server % n]!.down = st.down;
              else if (st.kind === 'conflicts') servers[st.server % n]!.conflicts = st.n;
              else if (st.kind === 'stray') servers[st.server % n]!.counterPair = { increment: st.increment, offset: 1 };
              else {
                // Fenced while every allocator has a draw in flight.
                const inflight = allocs.map((a) =>
                  a.next().then(
                    (id) => handed.push(id),
                    () => undefined,
                  ),
                );
                await new Promise((r) => setImmediate(r));
                increment = n + st.extra;
                const next = shuffled(
                  Array.from({ length: increment }, (_, i) => i + 1),
                  st.seed,
                ).slice(0, n);
                reshardMemory(
                  servers.map((server, i) => ({ server, offset: next[i]! })),
                  increment,
                );
                await Promise.all(inflight);
              }
            }
            for (const s of servers) s.down = false;
            for (const alloc of allocs)
              handed.push(
                ...(await Promise.all(Array.from({ length: 3 }, () => alloc.next().catch(() => undefined)))).filter(
                  (id): id is bigint => id !== undefined,
                ),
              );
          } finally {
            await Promise.all(allocs.map((a) => a.close()));
          }
          expect(new Set(handed).size).toBe(handed.length);
          // Every ID handed out was issued by some server's counter.
          const issued = new Set(servers.flatMap((s) => s.issued));
          expect(handed.every((id) => issued.has(id))).toBe(true);
        },
      ),
      { numRuns: 30 },
    );
  });
});

/** A deterministic shuffle (the property's seed picks the order). */
function shuffled<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let x = seed || 1;
  for (let i = out.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) % 2147483648;
    const j = x % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
