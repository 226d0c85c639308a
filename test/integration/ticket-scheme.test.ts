/**
 * Tickets keep one scheme (issue 42, item 2). Three private MariaDB ticket servers at increment
 * 3 and an allocator drawing from all three, as in the issue: the hint of a two-server
 * `tickets next` used to print `tickets reshard` with those two servers, which, run as printed,
 * moved t1 and t2 to increment 2 while t3 went on at 3, and the running allocator followed t1 and
 * t2 and kept drawing from t3 (257–1,348 repeats). Here: the hint offers no partial reshard, the
 * partial reshard is refused naming what it leaves out, a full reshard and a refused partial one
 * are drawn through with 0 repeats, and a mixed set made anyway (an offset declared vacant that a
 * server still serves) stops the allocator with a typed error and `tickets status` with a non-zero
 * exit, until a full reshard makes the set one scheme again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createTicketAllocator, reshardTickets, type TicketAllocator } from '../../src/ticket/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { startMariadb, type ServerInstance } from '../helpers/servers.js';
import { runCli } from '../helpers/cli.js';
import { drawing, repeats } from '../helpers/drawing.js';

let instances: ServerInstance[] = [];
const handles: Knex[] = [];
let t1: Knex, t2: Knex, t3: Knex;
let urls: string[];

beforeAll(async () => {
  instances = await Promise.all([1, 2, 3].map(() => startMariadb()));
  urls = instances.map((i) => i.url);
  [t1, t2, t3] = instances.map((i) => {
    const k = connect(i.url, { poolMax: 4 });
    handles.push(k);
    return k;
  }) as [Knex, Knex, Knex];
  await Promise.all([t1, t2, t3].map((k, i) => migrate(k, { segments: false, tickets: { increment: 3, offset: i + 1 } })));
});

afterAll(async () => {
  await Promise.all(handles.map((h) => h.destroy().catch(() => undefined)));
  await Promise.all(instances.map((i) => i.destroy()));
});

/** Callers drawing from a ticket allocator until stopped. */
const drawFrom = (alloc: TicketAllocator, callers = 4) => drawing(Array.from({ length: callers }, () => () => alloc.next()));

const servers = () => [
  { knex: t1, offset: 1, name: 't1' },
  { knex: t2, offset: 2, name: 't2' },
  { knex: t3, offset: 3, name: 't3' },
];

/** The first command a CLI message quotes. */
function quoted(stderr: string): string | undefined {
  return /`((?:npx )?idlease [^`]+)`/.exec(stderr)?.[1];
}

/** Every server of the set on one scheme again (whatever an earlier test left), through the library. */
async function wholeSet(increment: number, vacantOffsets?: number[]): Promise<void> {
  await reshardTickets({ servers: servers(), increment, ...(vacantOffsets ? { vacantOffsets } : {}) } as Parameters<
    typeof reshardTickets
  >[0]);
}

const serverFlags = () => urls.flatMap((u) => ['--server', u]);

describe('tickets keep one scheme (3 MariaDB servers at increment 3)', () => {
  it('the issue: the hint offers no partial reshard, the partial reshard is refused, the allocator drawing through it: 0 repeats', async () => {
    const alloc = createTicketAllocator({ servers: servers(), timeoutMs: 10_000 });
    const run = drawFrom(alloc);
    try {
      await run.more(300);
      // The command of the issue: two of the three servers, the increment left to its default (2).
      const two = await runCli(['tickets', 'next', '--server', urls[0]!, '--server', urls[1]!]);
      expect(two.code, two.stderr).toBe(2);
      expect(two.stderr).toMatch(/BAD_CONFIG/);
      expect.soft(two.stderr).not.toMatch(/tickets reshard --server/);
      // What the hint offers runs, and runs safely: the command again with the set's own scheme.
      const hint = quoted(two.stderr);
      expect.soft(hint).toMatch(/^idlease tickets next --server \S+ --server \S+ --increment 3 --offsets 1,2$/);
      if (hint?.includes('--increment 3')) {
        const fixed = await runCli(hint.replace(/^idlease /, '').split(' '));
        expect.soft(fixed.code, fixed.stderr).toBe(0);
      }

      // The reshard the hint used to print: refused, naming what it leaves out and how to retire a server.
      const partial = await runCli(['tickets', 'reshard', '--server', urls[0]!, '--server', urls[1]!]);
      expect.soft(partial.code, partial.stdout + partial.stderr).toBe(2);
      expect.soft(partial.stderr).toMatch(/BAD_ARGUMENT: .*offset 3 of increment 3.*--retire/);
      await run.more(600);
      const status = await runCli(['--json', 'tickets', 'status', ...serverFlags()]);
      const rows = (JSON.parse(status.stdout) as { servers: Array<{ offset: number; increment: number }> }).servers;
      const mixed = new Set(rows.map((r) => r.increment)).size > 1;
      // A mixed set is a failure for a script reading the exit code.
      expect.soft(status.code, `${status.stdout}${status.stderr}`).toBe(mixed ? 2 : 0);
      expect.soft(rows.map((r) => [r.offset, r.increment])).toEqual([
        [1, 3],
        [2, 3],
        [3, 3],
      ]);
      await run.stop();
      expect(repeats(run.ids)).toBe(0);
    } finally {
      await run.stop();
      await alloc.close();
    }
  }, 180_000);

  it('a full reshard (3 → increment 5) while the allocator draws: it moves with all three servers, 0 repeats', async () => {
    await wholeSet(3);
    const alloc = createTicketAllocator({ servers: servers(), timeoutMs: 10_000 });
    const run = drawFrom(alloc);
    try {
      await run.more(300);
      const before = run.ids.length;
      const full = await runCli(['--json', 'tickets', 'reshard', '--increment', '5', ...serverFlags()]);
      expect(full.code, full.stderr).toBe(0);
      const globalMax = BigInt((JSON.parse(full.stdout) as { globalMax: string }).globalMax);
      await run.more(600);
      await run.stop();
      expect(run.errors).toEqual([]);
      expect(repeats(run.ids)).toBe(0);
      const after = run.ids.slice(before).filter((id) => id > globalMax);
      expect(after.length).toBeGreaterThan(0);
      for (const id of after) expect([1n, 2n, 3n]).toContain(id % 5n);
      const status = await runCli(['tickets', 'status', '--increment', '5', ...serverFlags()]);
      expect(status.code, status.stdout + status.stderr).toBe(0);
    } finally {
      await run.stop();
      await alloc.close();
    }
  }, 180_000);

  it('a mixed set made anyway (an offset declared vacant that t3 serves): the allocator refuses with a typed error, status exits non-zero, a full reshard ends it; 0 repeats', async () => {
    await wholeSet(5);
    const alloc = createTicketAllocator({ servers: servers(), increment: 5, timeoutMs: 3_000 });
    const run = drawFrom(alloc);
    try {
      await run.more(300);
      // The operator's mistake: t1 and t2 to increment 2, t3 said to be gone while it serves offset 3 of 5.
      await reshardTickets({
        servers: [
          { knex: t1, offset: 1 },
          { knex: t2, offset: 2 },
        ],
        increment: 2,
        vacantOffsets: [3, 4, 5],
      } as Parameters<typeof reshardTickets>[0]);
      await run.more(600, { orErrors: true });
      const refused = run.errors.at(-1);
      expect.soft(isIdleaseError(refused, 'BAD_CONFIG'), String(refused)).toBe(true);
      expect.soft(String((refused as Error | undefined)?.message)).toMatch(/mixed schemes.*t3 serves offset 3 of increment 5/);
      const status = await runCli(['tickets', 'status', '--increment', '5', ...serverFlags()]);
      expect.soft(status.stdout).toMatch(/offset 1\/2/);
      expect.soft(status.stdout).toMatch(/offset 3\/5/);
      expect.soft(status.code, status.stdout + status.stderr).toBe(2);
      expect.soft(status.stderr).toMatch(/mixed schemes/);

      // The whole set on one scheme again: the allocator draws again by itself. Increment 5 has
      // only t3 left on it, so its other offsets are declared vacant, as the refusal says.
      await expect(wholeSet(3)).rejects.toMatchObject({
        code: 'BAD_ARGUMENT',
        message: expect.stringMatching(/no server named here serves offset 1 of increment 5.*vacantOffsets: \[1,2,4,5\]/),
      });
      await wholeSet(3, [1, 2, 4, 5]);
      await run.more(300);
      await run.stop();
      // Every call refused was refused with a typed error saying why.
      expect.soft(run.errors.filter((e) => !isIdleaseError(e, 'BAD_CONFIG'))).toEqual([]);
      expect(repeats(run.ids)).toBe(0);
    } finally {
      await run.stop();
      await alloc.close();
    }
  }, 180_000);
  it('a retire (3 → 2, t3 leaves) and a grow back (2 → 3) through the CLI while the allocator draws: 0 repeats, no failed call', async () => {
    await wholeSet(3);
    const alloc = createTicketAllocator({ servers: servers(), timeoutMs: 10_000 });
    const run = drawFrom(alloc);
    try {
      await run.more(300);
      const retire = await runCli(['--json', 'tickets', 'reshard', '--server', urls[0]!, '--server', urls[1]!, '--retire', urls[2]!]);
      expect(retire.code, retire.stderr).toBe(0);
      const shrunk = BigInt((JSON.parse(retire.stdout) as { globalMax: string }).globalMax);
      await run.more(600);
      const grow = await runCli(['--json', 'tickets', 'reshard', ...serverFlags()]);
      expect(grow.code, grow.stderr).toBe(0);
      const grown = BigInt((JSON.parse(grow.stdout) as { globalMax: string }).globalMax);
      // Servers come back as their probes find them reopened (backoff): draw until all three served.
      const classesAfter = () => new Set(run.ids.filter((id) => id > grown).map((id) => id % 3n)).size;
      while (classesAfter() < 3) await run.more(100);
      await run.stop();
      expect(run.errors).toEqual([]);
      expect(repeats(run.ids)).toBe(0);
      // Between the two reshards only t1 and t2 drew, at increment 2.
      const between = run.ids.filter((id) => id > shrunk && id <= grown);
      expect(between.length).toBeGreaterThan(0);
    } finally {
      await run.stop();
      await alloc.close();
    }
  }, 180_000);
});
