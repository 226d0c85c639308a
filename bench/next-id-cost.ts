/**
 * What each next_id() contender costs the server, in instructions counted by valgrind's
 * callgrind: exact and repeatable (the same count on a busy or an idle machine), where the
 * timed bench's seconds drift by tens of percent and `perf` has no hardware counters on many VMs.
 *
 *   npx tsx bench/run.ts next-id-cost        (needs valgrind and the PostgreSQL server binaries)
 *
 * A private PostgreSQL runs under callgrind; each measurement is one backend (one connection)
 * doing n single-row autocommit inserts, or one n-row INSERT … SELECT, and the figure per insert
 * (per row) is the difference between two sizes divided by the difference in n, so connection
 * set-up and the statement's own cost cancel out.
 *
 * next_id()'s cost depends on how often it must catch its counter up to the clock (a draw more
 * than NEXT_ID_SLACK_MS behind it), and under valgrind everything runs ~50× slower, so its two
 * costs are measured apart: with a pause before every insert (every draw stale, each catches up)
 * and then with its counter set an hour ahead of the clock (no draw stale: the fast path alone).
 * Catch-ups are counted (pg_stat_user_functions) to check both. How often they happen at full
 * speed is what the timed bench (`npm run bench -- next-id`) prints.
 */
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import type { Knex } from 'knex';
import { connect } from '../src/connect.js';
import { NEXT_ID_SEQUENCE, NEXT_ID_SLACK_MS } from '../src/dialects/next-id.js';
import { DEFAULT_LAYOUT } from '../src/layout/index.js';
import { postgresTempDir, startPostgres } from '../test/helpers/servers.js';
import { CONTENDERS, OURS, catchUpCount, catchUpCountAfter, installContenders, tableOf } from './next-id.js';

const SINGLE = [100, 500] as const;
const BULK = [2_000, 12_000] as const;
const PAUSE_MS = NEXT_ID_SLACK_MS + 2;

/** Total instructions of one finished backend, from its callgrind output file. */
async function instructionsOf(outDir: string, pid: number): Promise<number> {
  const file = path.join(outDir, `cg.${pid}`);
  for (let i = 0; i < 200; i++) {
    if (existsSync(file)) {
      const m = /^(?:summary|totals): (\d+)/m.exec(readFileSync(file, 'utf8'));
      if (m) return Number(m[1]);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`callgrind wrote no totals for backend ${pid} in ${outDir}`);
}

interface Measured {
  readonly instructions: number;
  readonly catchUps: number;
}

/** One backend doing `work`, then gone: its instructions and, when `counted`, the catch-ups it made. */
async function oneBackend(url: string, outDir: string, admin: Knex, counted: boolean, work: (k: Knex) => Promise<void>): Promise<Measured> {
  const before = counted ? await catchUpCount(admin) : 0;
  const k = connect(url, { poolMax: 1 });
  let pid: number;
  try {
    await k.raw('SET synchronous_commit = off');
    pid = (await k.raw('SELECT pg_backend_pid() AS p')).rows[0].p as number;
    await work(k);
  } finally {
    await k.destroy();
  }
  const instructions = await instructionsOf(outDir, pid);
  return { instructions, catchUps: counted ? (await catchUpCountAfter(admin, before)) - before : 0 };
}

/** Per insert (or row): the difference between the two sizes. */
function perUnit(small: Measured, large: Measured, n: readonly [number, number]): Measured {
  const d = n[1] - n[0];
  return { instructions: (large.instructions - small.instructions) / d, catchUps: (large.catchUps - small.catchUps) / d };
}

export default async function run(): Promise<void> {
  if (spawnSync('valgrind', ['--version']).status !== 0) {
    throw new Error('valgrind is not installed: apt-get install valgrind (this suite counts instructions with callgrind)');
  }
  const outDir = postgresTempDir('idlease-callgrind-');
  const server = await startPostgres({
    wrapper: ['valgrind', '--tool=callgrind', '--trace-children=yes', `--callgrind-out-file=${outDir}/cg.%p`],
    settings: { autovacuum: 'off', track_functions: 'pl' },
    startTimeoutMs: 120_000,
  });
  const admin = connect(server.url, { poolMax: 1 });
  try {
    await installContenders(admin);
    const version = (await admin.raw('SHOW server_version')).rows[0].server_version as string;
    console.log(
      `PostgreSQL ${version} under callgrind; instructions of the backend only (the client is the same for every contender). Single-row: autocommit inserts on one connection, ${SINGLE[0]} and ${SINGLE[1]} per backend; bulk: one INSERT … SELECT of ${BULK[0].toLocaleString('en')} and of ${BULK[1].toLocaleString('en')} rows.\n`,
    );

    const ours = CONTENDERS.findIndex((c) => c.column.includes(`${OURS}.next_id()`));
    const singles = async (i: number, pauseMs: number): Promise<Measured> => {
      const sizes = [] as Measured[];
      for (const n of SINGLE) {
        await admin.raw(`TRUNCATE ${tableOf(i)}`);
        sizes.push(
          await oneBackend(server.url, outDir, admin, i === ours, async (k) => {
            for (let j = 0; j < n; j++) {
              if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
              await k.raw(`INSERT INTO ${tableOf(i)} (x) VALUES (?)`, [j]);
            }
          }),
        );
      }
      return perUnit(sizes[0]!, sizes[1]!, SINGLE);
    };
    const bulk = async (i: number): Promise<Measured> => {
      const sizes = [] as Measured[];
      for (const n of BULK) {
        await admin.raw(`TRUNCATE ${tableOf(i)}`);
        sizes.push(
          await oneBackend(server.url, outDir, admin, i === ours, async (k) => {
            await k.raw(`INSERT INTO ${tableOf(i)} (x) SELECT g FROM generate_series(1, ?) g`, [n]);
          }),
        );
      }
      return perUnit(sizes[0]!, sizes[1]!, BULK);
    };

    // next_id() first with a pause before every insert (every draw stale: each one catches up),
    // then with its counter an hour ahead of the clock (no draw stale: the fast path alone).
    const pausedBase = await singles(0, PAUSE_MS);
    const pausedOurs = await singles(ours, PAUSE_MS);
    const { epochMs, sequenceBits } = DEFAULT_LAYOUT;
    await admin.raw(`SELECT setval(?::regclass, ((extract(epoch FROM clock_timestamp()) * 1000 - ? + 3600000) * ?)::bigint)`, [
      `${OURS}.${NEXT_ID_SEQUENCE}`,
      epochMs,
      2 ** sequenceBits,
    ]);
    const single = [] as Measured[];
    const rows = [] as Measured[];
    for (const [i] of CONTENDERS.entries()) {
      single.push(await singles(i, 0));
      rows.push(await bulk(i));
    }
    if (single[ours]!.catchUps > 0 || rows[ours]!.catchUps > 0)
      throw new Error('next_id() caught up with its counter an hour ahead: the fast-path figures would be mixed');

    const k = (x: number) => `${(x / 1000).toFixed(1)}k`;
    const pct = (x: number, of: number) => `${((x / of) * 100).toFixed(0)} %`;
    console.log('| contender | single-row: instructions per insert | × bigserial | bulk: instructions per row | × bigserial |');
    console.log('|---|---:|---:|---:|---:|');
    for (const [i, c] of CONTENDERS.entries()) {
      const s = single[i]!;
      const b = rows[i]!;
      const name = i === ours ? `${c.name}, fast path` : c.name;
      console.log(
        `| ${name} | ${k(s.instructions)} | ${(s.instructions / single[0]!.instructions).toFixed(2)} | ${k(b.instructions)} | ${(b.instructions / rows[0]!.instructions).toFixed(2)} |`,
      );
    }
    const everyOne = pausedOurs.instructions - pausedBase.instructions;
    const fast = single[ours]!.instructions - single[0]!.instructions;
    console.log(
      `| ${CONTENDERS[ours]!.name}, every insert catching up (${PAUSE_MS} ms apart, ${pct(pausedOurs.catchUps, 1)} caught up) | ${k(pausedOurs.instructions)} | ${(pausedOurs.instructions / pausedBase.instructions).toFixed(2)} | | |`,
    );
    const singleRatio = single[ours]!.instructions / single[0]!.instructions;
    const bulkRatio = rows[ours]!.instructions / rows[0]!.instructions;
    console.log('\n| target (issue 12) | this run | met |');
    console.log('|---|---:|---|');
    console.log(
      `| single-row ≤ 1.20× bigserial's instructions per insert (fast path; catch-ups add the line below × their rate) | ${singleRatio.toFixed(2)}× | ${singleRatio <= 1.2 ? 'yes' : 'no'} |`,
    );
    console.log(`| bulk ≤ 1.35× bigserial's instructions per row | ${bulkRatio.toFixed(2)}× | ${bulkRatio <= 1.35 ? 'yes' : 'no'} |`);
    console.log(
      `\nnext_id() single-row, beyond bigserial's ${k(single[0]!.instructions)} per insert: fast path +${k(fast)} (${pct(fast, single[0]!.instructions)}); a catch-up +${k(everyOne - fast)} more. At a rate of f catch-ups per insert: +${k(fast)} + f × ${k(everyOne - fast)} (the timed bench prints f).`,
    );
  } finally {
    await admin.destroy();
    await server.destroy();
    // Every process of the server wrote a file; only the per-backend ones were read.
    for (const f of readdirSync(outDir)) rmSync(path.join(outDir, f), { force: true });
    rmSync(outDir, { recursive: true, force: true });
  }
}
