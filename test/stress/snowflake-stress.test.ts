/**
 * Snowflake allocators as real OS processes on MariaDB and PostgreSQL, 2 worker bits (4 ids), 7
 * processes over the run, so ids are taken over:
 *   - a is SIGSTOPped; e (waiting, all ids held) claims a's id once a's lease has run out; a is
 *     SIGCONTed while e holds it and must report `lost`;
 *   - b is SIGKILLed (its id expires) and restarted as b2; c and d stop with SIGTERM (release);
 *   - `skewed` runs with libfaketime preloaded, FAKETIME=-10s (checked: its Date.now() is ~10 s back) and takes a
 *     used id whose row records times ~10 s ahead of its clock (maxLeadMs 15 s lets it borrow).
 * Every step waits for the lines the workers print (claimed/renewed/lost), never a fixed sleep.
 * Every ID is collected from the files: no duplicate anywhere, each process strictly increasing.
 *
 * PGlite is one in-process connection, so there the "processes" are allocators in this process
 * sharing the one handle: a pause is a blocked event loop (the allocators' monotonic clock runs
 * on), a kill is dropping an allocator without close(), and the clock 10 s back an injected clock.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { REPO_ROOT } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createSnowflakeAllocator, SYSTEM_CLOCK, type SnowflakeEvent } from '../../src/snowflake/index.js';
import { STRESS_LAYOUT } from './snowflake-layout.js';
import { sleep } from '../helpers/wait.js';

const WORKER = path.join(REPO_ROOT, 'test/stress/snowflake-worker.ts');
const TTL = 1_000;
/** How long any one awaited step may take before the test fails with the logs (worker start-up under load is the slow part). */
const STEP_MS = 20_000;

function checkRuns(runs: { name: string; ids: bigint[] }[]): void {
  const seen = new Map<bigint, string>();
  const dups: string[] = [];
  for (const { name, ids } of runs) {
    for (let i = 0; i < ids.length; i++) {
      if (i > 0 && !(ids[i]! > ids[i - 1]!)) throw new Error(`${name}: not strictly increasing at ${i}: ${ids[i - 1]} then ${ids[i]}`);
      const other = seen.get(ids[i]!);
      if (other !== undefined) dups.push(`${ids[i]} (${other}, ${name})`);
      seen.set(ids[i]!, name);
    }
  }
  expect(dups.length, `duplicates: ${dups.slice(0, 5).join('; ')}`).toBe(0);
}

/** libfaketime's multithreaded build (node runs threads), from the faketime package. */
function findLibfaketime(): string {
  const dirs = ['/usr/lib', '/usr/local/lib', ...readdirSync('/usr/lib').map((d) => path.join('/usr/lib', d))];
  for (const d of dirs) {
    const lib = path.join(d, 'faketime/libfaketimeMT.so.1');
    if (existsSync(lib)) return lib;
  }
  throw new Error('libfaketime is missing: apt-get install faketime (scripts/ensure-databases.sh installs it)');
}

interface Proc {
  name: string;
  child: ChildProcess;
  out: string;
  log: string;
  /** Resolves once `log` matches; rejects with every process's log after STEP_MS or if the process exits first. */
  waitFor(re: RegExp): Promise<RegExpMatchArray>;
}

describe.each(['mysql', 'postgres'] as const)('snowflake processes on %s', (flavor) => {
  let db: TestDb;
  let dir: string;
  let fakeLib: string;
  const procs: Proc[] = [];
  const alive = (c: ChildProcess) => c.exitCode === null && c.signalCode === null;
  const exited = (c: ChildProcess) => new Promise((r) => (alive(c) ? c.once('exit', r) : r(null)));

  beforeAll(async () => {
    fakeLib = findLibfaketime();
    db = await createTestDb(flavor, 'snowflake_stress');
    await migrate(db.knex, { segments: false, workers: true });
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-snowflake-'));
  });
  afterAll(async () => {
    for (const p of procs) {
      if (!alive(p.child)) continue;
      p.child.kill('SIGCONT');
      p.child.kill('SIGKILL');
      await exited(p.child);
    }
    await db?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const dump = () =>
    procs
      .map(
        (p) =>
          `--- ${p.name}\n${p.log
            .split('\n')
            .filter((l) => !l.startsWith('renewed'))
            .join('\n')}`,
      )
      .join('\n');

  function start(name: string, skewed = false): Proc {
    const out = path.join(dir, `${name}.bin`);
    writeFileSync(out, '');
    const cfg = { url: db.url, out, leaseTtlMs: TTL, maxLeadMs: skewed ? 15_000 : 200, waitTimeoutMs: 2_000 };
    const args = [builtWorker(WORKER), JSON.stringify(cfg)];
    // libfaketime preloaded into node itself, not the `faketime` wrapper: the wrapper forks, so
    // signals sent to it would not reach node.
    const env = skewed ? { ...process.env, LD_PRELOAD: fakeLib, FAKETIME: '-10s' } : process.env;
    const child = spawn(process.execPath, args, { cwd: REPO_ROOT, env });
    const p: Proc = {
      name,
      child,
      out,
      log: '',
      waitFor: (re) =>
        new Promise((resolve, reject) => {
          const check = () => {
            const m = p.log.match(re);
            if (m) {
              cleanup();
              resolve(m);
            }
          };
          const fail = (why: string) => {
            cleanup();
            reject(new Error(`${name}: ${why} waiting for ${re}\n${dump()}`));
          };
          const onExit = () => {
            check();
            fail('exited');
          };
          const timer = setTimeout(() => fail(`${STEP_MS} ms`), STEP_MS);
          const cleanup = () => {
            clearTimeout(timer);
            child.stdout!.off('data', check);
            child.off('exit', onExit);
          };
          child.stdout!.on('data', check);
          child.once('exit', onExit);
          check();
        }),
    };
    child.stdout!.on('data', (d: Buffer) => (p.log += d));
    child.stderr!.on('data', (d: Buffer) => (p.log += d));
    procs.push(p);
    return p;
  }

  async function waitForIds(p: Proc): Promise<void> {
    const until = Date.now() + STEP_MS;
    while (statSync(p.out).size === 0) {
      if (Date.now() > until) throw new Error(`${p.name} wrote no IDs in ${STEP_MS} ms\n${dump()}`);
      await sleep(20);
    }
  }

  it('takeovers, SIGSTOP past the lease, SIGKILL + restart, a clock 10 s back: 0 duplicates', async () => {
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((n) => start(n));
    const ids = await Promise.all([a, b, c, d].map((p) => p!.waitFor(/claimed (\d)/)));
    expect(new Set(ids.map((m) => m[1])).size).toBe(4);
    const aId = ids[0]![1];
    const e = start('e');
    await e.waitFor(/waiting NO_WORKER_ID/); // all 4 ids are held
    await waitForIds(a!);

    a!.child.kill('SIGSTOP');
    // e can claim a's id only once a's lease has run out by the database's clock: a is past its TTL.
    expect((await e.waitFor(/claimed (\d)/))[1]).toBe(aId);
    await waitForIds(e);
    // Keep a stopped until e's clock has passed the bound a recorded (< ttl + maxLeadMs + a unit
    // after a's last renewal): a wakes with a wall clock inside the time e is using, so only the
    // fence stands between a and duplicates. e renews every ttl/3: its 3rd renewal is late enough.
    await e.waitFor(/claimed \d\n(?:[^\n]*\n)*?renewed[^\n]*\n(?:[^\n]*\n)*?renewed[^\n]*\n(?:[^\n]*\n)*?renewed/);
    a!.child.kill('SIGCONT');
    await a!.waitFor(new RegExp(`lost ${aId}`));

    b!.child.kill('SIGKILL');
    await exited(b!.child);
    c!.child.kill('SIGTERM');
    d!.child.kill('SIGTERM');
    const b2 = start('b2');
    const skewed = start('skewed', true);
    const skewedStart = Number((await skewed.waitFor(/started (\d+)/))[1]);
    const behind = Date.now() - skewedStart;
    expect(behind, "faketime -f -10s must set Node's Date.now() back ~10 s").toBeGreaterThan(8_000);
    expect(behind).toBeLessThan(12_000);
    // 3 contenders (a, b2, skewed) for the 3 ids b, c and d had.
    await Promise.all([a!.waitFor(/lost \d[\s\S]*claimed \d/), b2.waitFor(/claimed \d/), skewed.waitFor(/claimed \d/)]);
    await Promise.all([a!, b2, skewed].map(waitForIds));

    for (const p of procs) if (alive(p.child)) p.child.kill('SIGTERM');
    await Promise.all(procs.map((p) => exited(p.child)));
    for (const p of procs) {
      if (p !== b) expect(p.child.exitCode, `${p.name} exit\n${p.log}`).toBe(0);
      // Concurrent claims on MariaDB can deadlock (the claim's INSERT … SELECT takes gap locks);
      // the allocator retries them. Any other lease error or exception fails the test.
      const problems = p.log.split('\n').filter((l) => /Error|lease-error/.test(l) && !l.startsWith('lease-error ER_LOCK_DEADLOCK '));
      expect(problems, `${p.name}: ${p.log}`).toEqual([]);
    }
    const runs = procs.map((p) => {
      const buf = readFileSync(p.out);
      return { name: p.name, ids: [...new BigInt64Array(buf.buffer, buf.byteOffset, Math.floor(buf.length / 8))] };
    });
    checkRuns(runs);
  }, 80_000);
});

describe('snowflake allocators sharing one PGlite', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('pglite', 'snowflake_stress');
    await migrate(db.knex, { segments: false, workers: true });
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('6 allocators over 4 ids (one waiting), a blocked event loop past the lease, one dropped without close, one clock 10 s back: 0 duplicates', async () => {
    const runs: { name: string; ids: bigint[] }[] = [];
    const back = { ...SYSTEM_CLOCK, wallMs: () => Date.now() - 10_000 };
    const make = (name: string, skewed = false) => {
      const events: SnowflakeEvent[] = [];
      const alloc = createSnowflakeAllocator({
        knex: db.knex,
        group: 'stress',
        layout: STRESS_LAYOUT,
        leaseTtlMs: TTL,
        maxLeadMs: skewed ? 15_000 : 200,
        waitTimeoutMs: 500,
        onEvent: (ev) => events.push(ev),
        ...(skewed ? { clock: back } : {}),
      });
      const ids: bigint[] = [];
      runs.push({ name, ids });
      let stop = false;
      const done = (async () => {
        while (!stop) {
          ids.push(...(await alloc.nextBatch(16).catch(() => [] as bigint[])));
          await sleep(2);
        }
      })();
      return {
        alloc,
        ids,
        events,
        stop: async (close = true) => {
          stop = true;
          await done;
          if (close) await alloc.close();
        },
      };
    };
    const until = async (what: string, cond: () => boolean) => {
      const end = Date.now() + STEP_MS;
      while (!cond()) {
        if (Date.now() > end) throw new Error(`PGlite: no ${what} within ${STEP_MS} ms`);
        await sleep(10);
      }
    };
    const all = ['a', 'b', 'c', 'd'].map((n) => make(n));
    await until('4 claims with IDs', () => all.every((x) => x.ids.length > 0));
    const skewed = make('skewed', true);
    // Everyone is paused (one event loop): all leases run out; the fences stop every allocator until it renews.
    const blockedUntil = Date.now() + 2 * TTL;
    while (Date.now() < blockedUntil) {
      /* a blocked event loop, as a GC pause or SIGSTOP would */
    }
    // Who holds what after the pause depends on which loop ran first (a lapsed lease nobody took
    // is renewed); make room for both newcomers either way.
    await all[1]!.stop(false); // dropped without release: its id expires
    await all[2]!.stop(); // released
    const late = make('late');
    await until('IDs from the skewed and the late allocator', () => skewed.ids.length > 0 && late.ids.length > 0);
    for (const x of [all[0]!, all[3]!, skewed, late]) await x.stop();
    await all[1]!.alloc.close();
    checkRuns(runs);
  }, 60_000);
});
