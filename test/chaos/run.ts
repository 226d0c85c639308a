/**
 * One chaos run: private PostgreSQL, MariaDB and Redis servers; OS worker processes drawing from
 * every mechanism that lives on them — segments on PostgreSQL and on MariaDB, snowflake (worker
 * ids leased on PostgreSQL), the Redis sequence (windows leased from PostgreSQL), next_id()
 * (inserts into an attached column on PostgreSQL and on MariaDB), tickets (three MariaDB ticket
 * servers at increment 3) — while the
 * seed's schedule (schedule.ts) kills, pauses and freezes them and their servers, fails PostgreSQL
 * (a streaming standby) and MariaDB (two GTID replicas) over twice in a row losing writes each
 * time, wipes Redis and runs admin commands beside them. Every ID a worker was given is in its file; the checker
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
import { startMariadb, startPostgres, type PostgresInstance, type ServerInstance } from '../helpers/servers.js';
import { mariadbSql, promoteLosingWrites, rebuildReplica } from '../helpers/mariadb-replicas.js';
import { promotePgLosingWrites, startStandby } from '../helpers/pg-replicas.js';
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
  /** Which space took that long, after which fault: what a soak's worst figure needs to be read. */
  readonly worstRecovery: string;
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
  const [firstPg, redis, ...mariadbs] = await Promise.all([
    startPostgres(),
    startRedis('none'),
    // A primary and two replicas: next_id() on MariaDB needs its ticker (the event scheduler) and
    // a ROW binary log; GTID replication with log-slave-updates, so any of them can be promoted.
    ...[41, 42, 43].map((id) =>
      startMariadb([
        `--server-id=${id}`,
        '--innodb-lock-wait-timeout=5',
        '--event-scheduler=ON',
        '--log-bin=mariadb-bin',
        '--binlog-format=ROW',
        '--log-slave-updates',
      ]),
    ),
    // Three ticket servers: increment 3, offsets 1, 2, 3.
    ...[1, 2, 3].map((i) => startMariadb([`--server-id=${50 + i}`])),
  ]);
  const maria = mariadbs.slice(0, 3);
  const ticketServers = mariadbs.slice(3);
  // Who is primary now: the failovers move it, the faults that hit "the server" hit it.
  const primary: { pg: PostgresInstance; mariadb: ServerInstance } = { pg: firstPg, mariadb: maria[0]! };
  let pgStandby: PostgresInstance | undefined;
  // Everyone reaches each database through a switch standing in for a VIP, moved at a failover;
  // the workers' switch can also cut the link silently (cut-link), the admin commands' is never cut.
  const links = { pg: await startTcpSwitch(firstPg.port), mariadb: await startTcpSwitch(maria[0]!.port) };
  const adminLinks = { pg: await startTcpSwitch(firstPg.port), mariadb: await startTcpSwitch(maria[0]!.port) };
  const via = (url: string, port: number) => url.replace(/:\d+\//, `:${port}/`);
  const urls = { pg: via(firstPg.url, links.pg.port), mariadb: via(maria[0]!.url, links.mariadb.port) };
  const admin = {
    pg: connect(via(firstPg.url, adminLinks.pg.port), { poolMax: 1, connectTimeoutMs: 1_000 }),
    mariadb: connect(via(maria[0]!.url, adminLinks.mariadb.port), { poolMax: 1, connectTimeoutMs: 1_000 }),
  };
  const moveVip = (engine: 'pg' | 'mariadb', port: number) => {
    links[engine].pointTo(port);
    adminLinks[engine].pointTo(port);
  };
  // Faults on one engine's servers run one after another (a freeze does not land mid-failover).
  const engineLocks = { pg: Promise.resolve(), mariadb: Promise.resolve() };
  const onEngine = (engine: 'pg' | 'mariadb', fn: () => Promise<void>): Promise<void> => {
    const run = engineLocks[engine].then(fn);
    engineLocks[engine] = run.catch(() => undefined);
    return run;
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
    pgStandby = await startStandby(firstPg.port);
    await rebuildReplica(maria[1]!.port, maria[0]!.port);
    await rebuildReplica(maria[2]!.port, maria[0]!.port);
    // The primary's ticker runs (attach enabled it); a failover manager enables it on a promoted replica.
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
    const ends: Array<{ at: number; kind: FaultKind }> = [];
    const segmentRowReplicated = async (on: ServerInstance, replicas: readonly ServerInstance[]) => {
      const serverId = 41 + maria.indexOf(on);
      const until = Date.now() + 15_000;
      for (const r of replicas) {
        while (
          (await mariadbSql(r.port, "SELECT instance FROM test.idlease_segments WHERE tag = 'chaos'").catch(() => '')).trim() !==
          `mariadb:${serverId}`
        ) {
          if (Date.now() > until) return log(`  mariadb: the jump on ${serverId} not on ${r.port} after 15 s; promoting anyway`);
          await sleep(100);
        }
      }
    };
    const refuse = (kind: string) => (refused[kind] = (refused[kind] ?? 0) + 1);
    const hit = async (f: Fault): Promise<void> => {
      const pickOf = <T>(xs: readonly T[]): T => xs[f.pick % xs.length]!;
      switch (f.kind) {
        case 'kill-worker': {
          const w = pickOf([...live]);
          w.child.kill('SIGKILL');
          live.delete(w);
          start(w.kind);
          return;
        }
        case 'pause-worker': {
          const w = pickOf([...live]);
          w.child.kill('SIGSTOP');
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
          await sleep(LEASE_MS + f.forMs);
          clock.set(0);
          return;
        }
        case 'cut-link': {
          const heal = pickOf([links.pg, links.mariadb]).cut();
          await sleep(f.forMs);
          heal();
          return;
        }
        case 'kill-server': {
          // The primary of PostgreSQL or MariaDB (whichever is primary then), or a ticket server.
          const which = pickOf(['pg', 'mariadb', 0, 1, 2] as const);
          const bounce = async (server: ServerInstance) => {
            await server.kill();
            await sleep(f.forMs);
            await server.start();
          };
          if (typeof which === 'number') return bounce(ticketServers[which]!);
          return onEngine(which, () => bounce(primary[which]));
        }
        case 'freeze-server':
          return onEngine('mariadb', async () => {
            const pid = primary.mariadb.pid?.();
            if (pid === undefined) return;
            process.kill(pid, 'SIGSTOP');
            await sleep(f.forMs);
            process.kill(pid, 'SIGCONT');
          });
        case 'failover-pg':
          return onEngine('pg', async () => {
            for (const step of [1, 2]) {
              const from = primary.pg;
              const to = pgStandby!;
              await promotePgLosingWrites({ standby: to, loseMs: 500 + (f.forMs % 1_000), killOld: () => from.kill() });
              primary.pg = to;
              moveVip('pg', to.port);
              log(`  pg failover ${step}: ${from.port} → ${to.port}`);
              pgStandby = undefined;
              await from.destroy();
              pgStandby = await startStandby(to.port);
            }
          });
        case 'failover-mariadb':
          return onEngine('mariadb', async () => {
            const original = primary.mariadb;
            for (const step of [1, 2]) {
              const from = primary.mariadb;
              const replicas = maria.filter((m) => m !== from);
              // The second promotion goes back to the original primary (rejoined by then: a
              // fail-back within the gap) or on to the third server, as the seed says.
              const to =
                step === 1
                  ? pickOf(replicas)
                  : (replicas.find((m) => (Math.floor(f.pick / 2) % 2 === 0) === (m === original)) ?? replicas[0]!);
              // The manager enables the events it finds on the new primary (MaxScale's handle_events).
              await promoteLosingWrites({ to: to.port, loseMs: 500 + (f.forMs % 1_000), enableEvents: true, killOld: () => from.kill() });
              primary.mariadb = to;
              moveVip('mariadb', to.port);
              log(`  mariadb failover ${step}: ${from.port} → ${to.port}`);
              await from.start();
              for (const m of maria) if (m !== to) await rebuildReplica(m.port, to.port);
              // MariaDB's server_ids have no order, so a segment row's jump is one gap wherever it
              // lands: the next promotion must go to a server that received this primary's jump
              // (docs/failover.md says so). Every replica has by the time it has replicated the
              // row naming this server; next_id(), tickets and the rest need no such wait.
              if (step === 1)
                await segmentRowReplicated(
                  to,
                  maria.filter((m) => m !== to),
                );
            }
          });
        case 'redis-flush':
          await redis.command('FLUSHALL').catch(() => refuse(f.kind));
          return;
        case 'redis-restart':
          await redis.kill();
          await sleep(f.forMs);
          await redis.start();
          return;
        case 'set-step':
        case 'bump': {
          const db = pickOf([admin.pg, admin.mariadb]);
          try {
            if (f.kind === 'set-step') await setStep(db, 'chaos', pickOf([1, 7, 100, 5_000, 100_000]));
            else await bumpTag(db, { tag: 'chaos', by: 1 + (f.pick % 10_000) });
          } catch {
            // Its server may be down, frozen or failing over: an operator's command fails too.
            refuse(f.kind);
          }
          return;
        }
      }
    };
    // A fault ends when it is over (a server back, a failover done): recovery is counted from then.
    const apply = async (f: Fault): Promise<void> => {
      faults[f.kind]++;
      log(`${(f.atMs / 1000).toFixed(1)} s: ${f.kind} (${f.forMs} ms)`);
      try {
        await hit(f);
      } finally {
        ends.push({ at: Date.now() - t0, kind: f.kind });
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
    // A fault may end after the run's seconds (two failovers take a while): sample on until every
    // kind has issued after the last one ended, or 20 s more.
    const lastEnd = Math.max(0, ...ends.map((e) => e.at));
    const risenAfter = (end: number) => {
      const base = samples.filter((x) => x.at <= end).at(-1) ?? samples[0]!;
      const now = counts();
      return KINDS.every((k) => now[k] > base.c[k]);
    };
    for (const until = Date.now() + 20_000; !risenAfter(lastEnd) && Date.now() < until;) await sleep(200);
    await sleep(400);
    clearInterval(sampler);
    samples.push({ at: Date.now() - t0, c: counts() });

    // Recovery: from each fault's end, how long until every kind's count rose.
    const stalled = new Set<string>();
    const recovery = (end: number): { ms: number; space: string } => {
      const base = samples.filter((s) => s.at <= end).at(-1) ?? samples[0]!;
      let worst = { ms: 0, space: '' };
      for (const kind of KINDS) {
        const next = samples.find((s) => s.at > end && s.c[kind] > base.c[kind]);
        if (next === undefined) stalled.add(kind);
        else if (next.at - end > worst.ms) worst = { ms: next.at - end, space: kind };
      }
      return worst;
    };
    let worstRecoveryMs = 0;
    let worstRecovery = '';
    for (const e of ends) {
      const r = recovery(e.at);
      if (r.ms > worstRecoveryMs)
        [worstRecoveryMs, worstRecovery] = [r.ms, `${r.space} after ${e.kind} ended at ${(e.at / 1000).toFixed(1)} s`];
    }
    const recoveryAfterLastMs = recovery(lastEnd).ms;

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
      worstRecovery,
      recoveryAfterLastMs,
      stalled: [...stalled],
      workers: workers.length,
    };
  } finally {
    for (const t of timers) clearTimeout(t);
    for (const w of live) w.child.kill('SIGKILL');
    await Promise.allSettled([
      admin.pg.destroy(),
      admin.mariadb.destroy(),
      ...[links, adminLinks].flatMap((l) => [l.pg.close(), l.mariadb.close()]),
    ]);
    await Promise.allSettled([
      primary.pg.destroy(),
      pgStandby?.destroy(),
      redis.destroy(),
      ...maria.map((m) => m.destroy()),
      ...ticketServers.map((t) => t.destroy()),
    ]);
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
  return `seed ${r.seed} × ${r.seconds} s, ${r.workers} worker processes; faults: ${faults}${Object.keys(r.refused).length ? ` (refused: ${JSON.stringify(r.refused)})` : ''}; ${spaces}; recovery after a fault: worst ${r.worstRecoveryMs} ms (${r.worstRecovery}), after the last ${r.recoveryAfterLastMs} ms${r.stalled.length ? `; STALLED: ${r.stalled.join(', ')}` : ''}`;
}
