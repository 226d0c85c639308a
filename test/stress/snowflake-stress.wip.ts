// WORK IN PROGRESS, not run by vitest (named .wip.ts). Seen so far: the fixed sleeps do not force
// the takeovers reliably under load (in one PostgreSQL run the faketime process started too late
// to take the SIGSTOPped process's id, so 'lost' never happened; it took the SIGKILLed one's
// instead); two earlier runs failed reading a.bin (ENOENT), not reproduced since. The PGlite case
// waits out the 60 s waitTimeoutMs of an allocator that never gets an id on stop(). To do: wait
// for events (claimed/lost lines) instead of sleeping, stop via SIGTERM with a short waitTimeoutMs.
// Rename to .test.ts once it passes.
/**
 * Snowflake allocators as real OS processes on MariaDB and PostgreSQL, 2 worker bits (4 ids), 6
 * processes over the run: one SIGSTOPped past its lease while another takes its id, then
 * SIGCONTed; one SIGKILLed and restarted; one under faketime 10 s back (with maxLeadMs 15 s, so
 * it borrows ahead of its own clock instead of waiting for it). Every ID collected:
 * no duplicate anywhere, each process strictly increasing.
 *
 * PGlite is one in-process connection, so there "processes" are allocators in this process on
 * the one PGlite handle; a pause is a blocked event loop (the allocator's monotonic clock runs
 * on), a kill is dropping an allocator without close(), and the clock 10 s back an injected clock.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { REPO_ROOT, TSX_LOADER } from '../helpers/cli.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createSnowflakeAllocator, SYSTEM_CLOCK } from '../../src/snowflake/index.js';
import { STRESS_LAYOUT } from './snowflake-layout.js';

const WORKER = path.join(REPO_ROOT, 'test/stress/snowflake-worker.ts');
const TTL = 1_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function checkRuns(runs: bigint[][]): void {
  const seen = new Set<bigint>();
  let total = 0;
  for (const ids of runs) {
    for (let i = 0; i < ids.length; i++) {
      if (i > 0 && !(ids[i]! > ids[i - 1]!)) throw new Error(`not strictly increasing at ${i}: ${ids[i - 1]} then ${ids[i]}`);
      seen.add(ids[i]!);
    }
    total += ids.length;
  }
  expect(total - seen.size, 'duplicates').toBe(0);
}

describe.each(['mysql', 'postgres'] as const)('snowflake processes on %s', (flavor) => {
  let db: TestDb;
  let dir: string;
  beforeAll(async () => {
    const ft = spawnSync('faketime', ['-f', '-10s', 'true']);
    if (ft.status !== 0) throw new Error('faketime is missing: apt-get install faketime (scripts/ensure-databases.sh installs it)');
    db = await createTestDb(flavor, 'snowflake_stress');
    await migrate(db.knex, { segments: false, workers: true });
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-snowflake-'));
  });
  afterAll(async () => {
    await db?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('takeovers, SIGSTOP past the lease, SIGKILL + restart, a clock 10 s back: 0 duplicates', async () => {
    const procs: { name: string; child: ChildProcess; out: string; log: string }[] = [];
    const start = (name: string, fake = false) => {
      const out = path.join(dir, `${name}.bin`);
      const args = ['--import', TSX_LOADER, WORKER, JSON.stringify({ url: db.url, out, leaseTtlMs: TTL, maxLeadMs: fake ? 15_000 : 200 })];
      const child = fake ? spawn('faketime', ['-f', '-10s', process.execPath, ...args], { cwd: REPO_ROOT }) : spawn(process.execPath, args, { cwd: REPO_ROOT });
      const p = { name, child, out, log: '' };
      child.stdout!.on('data', (d: Buffer) => (p.log += d));
      child.stderr!.on('data', (d: Buffer) => (p.log += d));
      procs.push(p);
      return p;
    };
    const exited = (c: ChildProcess) => new Promise((r) => (c.exitCode !== null || c.signalCode !== null ? r(null) : c.once('exit', r)));
    const [a, b] = [start('a'), start('b'), start('c'), start('d')];
    await sleep(3_000);
    start('skewed', true); // waits: all 4 ids held
    await sleep(500);
    a!.child.kill('SIGSTOP');
    await sleep(3 * TTL); // a's lease runs out; 'skewed' takes its id
    a!.child.kill('SIGCONT');
    await sleep(1_000);
    b!.child.kill('SIGKILL');
    await exited(b!.child);
    start('b2');
    await sleep(3_000);
    for (const p of procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGTERM');
    await Promise.all(procs.map((p) => exited(p.child)));
    for (const p of procs) expect(p.log, `${p.name}: ${p.log}`).not.toMatch(/Error/);
    const runs = procs.map((p) => {
      const buf = readFileSync(p.out);
      return [...new BigInt64Array(buf.buffer, buf.byteOffset, Math.floor(buf.length / 8))];
    });
    for (const p of procs) expect(p.log, `${p.name}: ${p.log}`).not.toMatch(/Error/);
    const skewed = procs.find((p) => p.name === 'skewed')!;
    // The takeovers happened: 'skewed' got an id (a's or b's) and a lost its lease while stopped.
    expect(skewed.log, skewed.log).toMatch(/claimed [0-3]/);
    expect(a!.log, a!.log).toMatch(/lost [0-3]/);
    expect(runs[procs.indexOf(skewed)]!.length).toBeGreaterThan(0);
    checkRuns(runs);
  }, 60_000);
});

describe('snowflake allocators sharing one PGlite', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('pglite', 'snowflake_stress');
    await migrate(db.knex, { segments: false, workers: true });
  });
  afterAll(async () => { await db?.drop(); });

  it('6 allocators over 4 ids, a blocked event loop past the lease, one dropped without close, one clock 10 s back: 0 duplicates', async () => {
    const runs: bigint[][] = [];
    const back = { ...SYSTEM_CLOCK, wallMs: () => Date.now() - 10_000 };
    const make = (skewed = false) => {
      const alloc = createSnowflakeAllocator({ knex: db.knex, group: 'stress', layout: STRESS_LAYOUT, leaseTtlMs: TTL, maxLeadMs: skewed ? 15_000 : 200, waitTimeoutMs: 60_000, ...(skewed ? { clock: back } : {}) });
      const ids: bigint[] = [];
      runs.push(ids);
      let stop = false;
      const done = (async () => {
        while (!stop) {
          ids.push(...(await alloc.nextBatch(64).catch(() => [] as bigint[])));
          await sleep(1);
        }
      })();
      return { alloc, ids, stop: async (close = true) => { stop = true; await done; if (close) await alloc.close(); } };
    };
    const all = [make(), make(), make(), make()];
    await sleep(1_000);
    all.push(make(true));
    // Everyone is paused (one event loop): all leases run out; the fences stop every allocator until it renews.
    const until = Date.now() + 2 * TTL;
    while (Date.now() < until) { /* a blocked event loop, as a GC pause or SIGSTOP would */ }
    await sleep(1_000);
    await all[1]!.stop(false); // dropped without release: its id expires
    all.push(make());
    await sleep(2_500);
    for (const x of all) await x.stop(x !== all[1]);
    await all[1]!.alloc.close();
    expect(runs[4]!.length).toBeGreaterThan(0);
    checkRuns(runs);
  }, 60_000);
});
