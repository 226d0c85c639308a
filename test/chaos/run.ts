/**
 * One chaos run: private PostgreSQL, MariaDB and Redis servers; OS worker processes drawing from
 * every mechanism that lives on them — segments on PostgreSQL and on MariaDB, snowflake (worker
 * ids leased on PostgreSQL), the Redis sequence (windows leased from PostgreSQL), next_id()
 * (inserts into an attached column on PostgreSQL and on MariaDB), tickets (three MariaDB ticket
 * servers at increment 3) — while the
 * seed's schedule (schedule.ts) kills, pauses and freezes them and their servers, wipes Redis and
 * runs admin commands beside them. Every ID a worker was given is in its file; the checker
 * (check.ts) counts repeats and order violations per ID space, and the run measures, for every
 * fault, how long until every space issued again. Used by test/chaos/chaos.test.ts (one short
 * seed in CI) and `npm run chaos -- --seeds 1,2,3 --seconds 60` (soaks).
 */
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { attachNextId } from '../../src/next-id/attach.js';
import { addTag, bumpTag, setStep } from '../../src/segment/index.js';
import { REPO_ROOT } from '../helpers/cli.js';
import { clockStep, type ClockStep } from '../helpers/clock-step.js';
import { startHaProcess, startHaWorker, type Launch } from '../helpers/ha-workers.js';
import { startRedis } from '../helpers/redis.js';
import { startRedisWorker } from '../helpers/redis-workers.js';
import { startTcpSwitch } from '../helpers/tcp-switch.js';
import { startMariadb, startPostgres } from '../helpers/servers.js';
import { checkStreams, readStream, type SpaceReport } from './check.js';
import { FAULT_KINDS, scheduleFor, type Fault, type FaultKind } from './schedule.js';
import { sleep } from '../helpers/wait.js';

const SNOWFLAKE_WORKER = path.join(REPO_ROOT, 'test/ha/snowflake-ha-worker.ts');
const NEXT_ID_WORKER = path.join(REPO_ROOT, 'test/chaos/next-id-worker.ts');
const TICKET_WORKER = path.join(REPO_ROOT, 'test/partition/ticket-worker.ts');

type Kind = 'segment-pg' | 'segment-mariadb' | 'snowflake-pg' | 'redis' | 'next-id-pg' | 'next-id-mariadb' | 'tickets';
const KINDS: readonly Kind[] = ['segment-pg', 'segment-mariadb', 'snowflake-pg', 'redis', 'next-id-pg', 'next-id-mariadb', 'tickets'];
/** How long a worker may hold what it leased: a pause longer than this is a pause past the lease. */
const LEASE_MS = 3_000;

interface Worker {
  readonly kind: Kind;
  readonly name: string;
  readonly child: ChildProcess;
  readonly file: string;
  readonly exited: Promise<unknown>;
}

export interface ChaosReport {
  readonly seed: number;
  readonly seconds: number;
  readonly faults: Readonly<Record<FaultKind, number>>;
  /** Faults that could not be applied (an admin command while its server was down), by kind. */
  readonly refused: Readonly<Record<string, number>>;
  readonly spaces: readonly SpaceReport[];
  /** The longest any space took to issue again after a fault ended, ms (faults that overlap count the later one's time too). */
  readonly worstRecoveryMs: number;
  /** How long after the last fault ended until every space had issued again, ms. */
  readonly recoveryAfterLastMs: number;
  /** Spaces that issued nothing after some fault until the run ended. */
  readonly stalled: readonly string[];
  readonly workers: number;
}

export async function runChaos(o: { seed: number; seconds: number; log?: (line: string) => void }): Promise<ChaosReport> {
  const log = o.log ?? (() => undefined);
  const schedule = scheduleFor(o.seed, o.seconds);
  const dir = mkdtempSync(path.join(tmpdir(), `idlease-chaos-${o.seed}-`));
  const [pg, maria, redis, ...ticketServers] = await Promise.all([
    startPostgres(),
    // next_id() on MariaDB needs its ticker (the event scheduler) and a ROW binary log.
    startMariadb([
      '--server-id=41',
      '--innodb-lock-wait-timeout=5',
      '--event-scheduler=ON',
      '--log-bin=mariadb-bin',
      '--binlog-format=ROW',
    ]),
    startRedis('none'),
    // Three ticket servers: increment 3, offsets 1, 2, 3.
    ...[1, 2, 3].map((i) => startMariadb([`--server-id=${50 + i}`])),
  ]);
  // The workers reach each database through a switch that can cut the link silently (cut-link);
  // admin commands go straight to the server.
  const links = { pg: await startTcpSwitch(pg.port), mariadb: await startTcpSwitch(maria.port) };
  const via = (url: string, port: number) => url.replace(/:\d+\//, `:${port}/`);
  const urls = { pg: via(pg.url, links.pg.port), mariadb: via(maria.url, links.mariadb.port) };
  const admin = {
    pg: connect(pg.url, { poolMax: 1, connectTimeoutMs: 1_000 }),
    mariadb: connect(maria.url, { poolMax: 1, connectTimeoutMs: 1_000 }),
  };
  const workers: Worker[] = [];
  const live = new Set<Worker>();
  const timers: NodeJS.Timeout[] = [];
  const stopFile = path.join(dir, 'stop');
  let generation = 0;
  try {
    for (const db of [admin.pg, admin.mariadb]) {
      await migrate(db, { workers: true, nextId: true });
      await addTag(db, { tag: 'chaos', step: 100 });
      await db.raw('CREATE TABLE chaos_ids (id bigint NOT NULL, w int NOT NULL)');
      await attachNextId(db, { table: 'chaos_ids' });
    }
    await addTag(admin.pg, { tag: 'chaos-redis', step: 50 });
    for (const [i, t] of ticketServers.entries()) {
      const knex = connect(t.url, { poolMax: 1 });
      try {
        await migrate(knex, { segments: false, tickets: { increment: 3, offset: i + 1 } });
      } finally {
        await knex.destroy();
      }
    }

    const start = (kind: Kind, clock?: ClockStep): Worker => {
      const name = `${kind}-${generation++}`;
      const wdir = path.join(dir, kind);
      mkdirSync(wdir, { recursive: true }); // the HA workers of a kind share its stop file (wdir/stop)
      let child: ChildProcess;
      let file: string;
      let exited: Promise<unknown>;
      if (kind === 'redis') {
        const w = startRedisWorker(name, wdir, {
          dbUrl: urls.pg,
          redisPort: redis.port,
          tag: 'chaos-redis',
          client: 'node-redis',
          count: 1_000_000_000,
          stopFile,
          pauseMs: 1,
        });
        ({ child } = w);
        file = w.out;
        exited = w.exit;
      } else {
        // A worker with a stepped wall clock (clock-shift) runs under the clock-step library.
        const launch: Launch = clock
          ? (command, args, options) => spawn(command, args, { ...options, env: { ...process.env, ...clock.env } })
          : spawn;
        const w =
          kind === 'snowflake-pg'
            ? startHaProcess(
                SNOWFLAKE_WORKER,
                name,
                wdir,
                { url: urls.pg, leaseTtlMs: LEASE_MS, maxLeadMs: 500, waitTimeoutMs: 1_000 },
                launch,
              )
            : kind === 'tickets'
              ? startHaProcess(TICKET_WORKER, name, wdir, {
                  urls: ticketServers.map((t) => t.url),
                  callers: 2,
                  statementTimeoutMs: 1_000,
                  timeoutMs: 3_000,
                  backoffMaxMs: 1_000,
                })
              : kind === 'next-id-pg' || kind === 'next-id-mariadb'
                ? startHaProcess(NEXT_ID_WORKER, name, wdir, { url: kind === 'next-id-pg' ? urls.pg : urls.mariadb, table: 'chaos_ids' })
                : startHaWorker(name, wdir, {
                    url: kind === 'segment-pg' ? urls.pg : urls.mariadb,
                    tag: 'chaos',
                    maxStep: 100_000,
                    targetLeaseMs: 1_000,
                    connectTimeoutMs: 1_000,
                    waitTimeoutMs: 3_000,
                    statementTimeoutMs: 2_000,
                    pauseMs: 1,
                  });
        ({ child } = w);
        file = path.join(wdir, `${name}.bin`);
        exited = w.done.catch(() => undefined);
      }
      const worker: Worker = { kind, name, child, file, exited };
      workers.push(worker);
      live.add(worker);
      void exited.then(() => live.delete(worker));
      return worker;
    };
    for (const kind of KINDS) for (let i = 0; i < 2; i++) start(kind);

    // Progress per kind, sampled from the workers' files (each flushes every 256 IDs).
    const counts = (): Record<Kind, number> => {
      const c = Object.fromEntries(KINDS.map((k) => [k, 0])) as Record<Kind, number>;
      for (const w of workers) {
        try {
          c[w.kind] += statSync(w.file).size / 8;
        } catch {
          /* not written yet */
        }
      }
      return c;
    };
    const samples: Array<{ at: number; c: Record<Kind, number> }> = [];
    const t0 = Date.now();
    const sampler = setInterval(() => samples.push({ at: Date.now() - t0, c: counts() }), 200);

    const faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
    const refused: Record<string, number> = {};
    const ends: number[] = [];
    const apply = async (f: Fault): Promise<void> => {
      faults[f.kind]++;
      const pickOf = <T>(xs: readonly T[]): T => xs[f.pick % xs.length]!;
      log(`${(f.atMs / 1000).toFixed(1)} s: ${f.kind} (${f.forMs} ms)`);
      switch (f.kind) {
        case 'kill-worker': {
          const w = pickOf([...live]);
          w.child.kill('SIGKILL');
          live.delete(w);
          start(w.kind);
          ends.push(f.atMs);
          return;
        }
        case 'pause-worker': {
          const w = pickOf([...live]);
          w.child.kill('SIGSTOP');
          ends.push(f.atMs + LEASE_MS + f.forMs);
          await sleep(LEASE_MS + f.forMs);
          w.child.kill('SIGCONT');
          return;
        }
        case 'clock-shift': {
          // A snowflake process whose wall clock is 3 s ahead or behind, set right again later (a
          // step back on a live process: it must wait or fail, typed, never repeat).
          const old = pickOf([...live].filter((w) => w.kind === 'snowflake-pg'));
          if (old !== undefined) {
            old.child.kill('SIGKILL');
            live.delete(old);
          }
          const clock = clockStep();
          clock.set(f.pick % 2 === 0 ? 3_000 : -3_000);
          start('snowflake-pg', clock);
          ends.push(f.atMs + LEASE_MS + f.forMs);
          await sleep(LEASE_MS + f.forMs);
          clock.set(0);
          return;
        }
        case 'cut-link': {
          const heal = pickOf([links.pg, links.mariadb]).cut();
          ends.push(f.atMs + f.forMs);
          await sleep(f.forMs);
          heal();
          return;
        }
        case 'kill-server': {
          const server = pickOf([pg, maria, ...ticketServers]);
          ends.push(f.atMs + f.forMs);
          await server.kill();
          await sleep(f.forMs);
          await server.start();
          return;
        }
        case 'freeze-server': {
          const pid = maria.pid?.();
          ends.push(f.atMs + f.forMs);
          if (pid === undefined) return;
          process.kill(pid, 'SIGSTOP');
          await sleep(f.forMs);
          process.kill(pid, 'SIGCONT');
          return;
        }
        case 'redis-flush':
          ends.push(f.atMs);
          await redis.command('FLUSHALL').catch(() => (refused[f.kind] = (refused[f.kind] ?? 0) + 1));
          return;
        case 'redis-restart':
          ends.push(f.atMs + f.forMs);
          await redis.kill();
          await sleep(f.forMs);
          await redis.start();
          return;
        case 'set-step':
        case 'bump': {
          ends.push(f.atMs);
          const db = pickOf([admin.pg, admin.mariadb]);
          try {
            if (f.kind === 'set-step') await setStep(db, 'chaos', pickOf([1, 7, 100, 5_000, 100_000]));
            else await bumpTag(db, { tag: 'chaos', by: 1 + (f.pick % 10_000) });
          } catch {
            // Its server may be down or frozen by another fault: an operator's command fails too.
            refused[f.kind] = (refused[f.kind] ?? 0) + 1;
          }
          return;
        }
      }
    };
    const applied: Promise<void>[] = [];
    for (const f of schedule) {
      timers.push(
        setTimeout(() => {
          applied.push(apply(f).catch((err: unknown) => log(`fault ${f.kind} failed: ${String(err)}`)));
        }, f.atMs),
      );
    }
    await sleep(o.seconds * 1000);
    await Promise.all(applied);
    clearInterval(sampler);
    samples.push({ at: Date.now() - t0, c: counts() });

    // Recovery: from each fault's end, how long until every kind's count rose.
    const stalled = new Set<string>();
    const recovery = (end: number): number => {
      const base = samples.filter((s) => s.at <= end).at(-1) ?? samples[0]!;
      let worst = 0;
      for (const kind of KINDS) {
        const next = samples.find((s) => s.at > end && s.c[kind] > base.c[kind]);
        if (next === undefined) stalled.add(kind);
        else worst = Math.max(worst, next.at - end);
      }
      return worst;
    };
    const worstRecoveryMs = Math.max(0, ...ends.map(recovery));
    const recoveryAfterLastMs = recovery(Math.max(0, ...ends));

    writeFileSync(stopFile, '');
    for (const kind of KINDS) writeFileSync(path.join(dir, kind, 'stop'), '');
    const deadline = sleep(20_000).then(() => 'late');
    await Promise.race([Promise.all(workers.map((w) => w.exited)), deadline]);
    for (const w of live) w.child.kill('SIGKILL');
    const streams = workers.map((w) => {
      try {
        return readStream(w.kind, w.name, w.file, w.kind !== 'tickets');
      } catch {
        return readStream(w.kind, w.name, '/dev/null');
      }
    });
    return {
      seed: o.seed,
      seconds: o.seconds,
      faults,
      refused,
      spaces: checkStreams(streams),
      worstRecoveryMs,
      recoveryAfterLastMs,
      stalled: [...stalled],
      workers: workers.length,
    };
  } finally {
    for (const t of timers) clearTimeout(t);
    for (const w of live) w.child.kill('SIGKILL');
    await Promise.allSettled([admin.pg.destroy(), admin.mariadb.destroy(), links.pg.close(), links.mariadb.close()]);
    await Promise.allSettled([pg.destroy(), maria.destroy(), redis.destroy(), ...ticketServers.map((t) => t.destroy())]);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** One line per run: what a soak's table and a failing test's message show. */
export function describeRun(r: ChaosReport): string {
  const faults = Object.entries(r.faults)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
  const spaces = r.spaces
    .map(
      (s) =>
        `${s.space} ${s.ids} IDs, ${s.repeats} repeats${s.examples.length ? ` (${s.examples.join(' ')})` : ''}, ${s.orderViolations.length} order violations`,
    )
    .join('; ');
  return `seed ${r.seed} × ${r.seconds} s, ${r.workers} worker processes; faults: ${faults}${Object.keys(r.refused).length ? ` (refused: ${JSON.stringify(r.refused)})` : ''}; ${spaces}; recovery after a fault: worst ${r.worstRecoveryMs} ms, after the last ${r.recoveryAfterLastMs} ms${r.stalled.length ? `; STALLED: ${r.stalled.join(', ')}` : ''}`;
}
