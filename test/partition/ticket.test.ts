/**
 * Ticket allocators as OS processes, each in a network namespace of its own, drawing from two
 * private MariaDB ticket servers (offsets 1 and 2 of 2) that share the partition's server address
 * on two ports (test/helpers/partition.ts). Server A is cut off from two of the three processes
 * (p0 both ways, p1 only A's answers), on A's port only: B stays reachable to everyone.
 *   - each cut process takes A out of its rotation within statementTimeoutMs of meeting the cut
 *     (a draw in flight is given up and the same next() is served by B); no call fails;
 *   - p2 is not cut and must not notice;
 *   - after the heal A comes back into p0's and p1's rotation within one probe backoff
 *     (backoffMaxMs + 25 % jitter) plus a probe, never refused, and issues above what it issued before;
 *   - every ID counted: no duplicate, each in its server's class; every process ends after the stop.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';
import { readIds } from '../helpers/ha-workers.js';
import { createPartitionNet, type Link, type PartitionNet } from '../helpers/partition.js';
import type { ServerInstance } from '../helpers/servers.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { partitionServer } from './servers.js';
import { sleep } from '../helpers/wait.js';

const WORKER = path.join(REPO_ROOT, 'test/partition/ticket-worker.ts');
const BOUNDS = { statementTimeoutMs: 1_000, timeoutMs: 3_000, backoffMaxMs: 1_000 };
const CUT_MS = 5_000;
/** Timers and worker processes on a loaded 2-core machine. */
const SLACK_MS = 500;
/**
 * Back in the rotation after the heal within: a probe caught in flight by the heal (its connect
 * given up at statementTimeoutMs), the backoff (at most backoffMaxMs + 25 % jitter), the next
 * probe (a session opened and the scheme checked, ≤ statementTimeoutMs), and slack.
 */
const BACK_WITHIN_MS = BOUNDS.statementTimeoutMs + BOUNDS.backoffMaxMs * 1.25 + BOUNDS.statementTimeoutMs + SLACK_MS;
const STEP_MS = 20_000;

interface Summary {
  ids: number;
  perServer: number[];
  errors: Record<string, number>;
  untyped: number;
  maxFailMs: number;
  maxCallMs: number;
  closeMs: number;
  destroyMs: number;
}

describe('ticket allocators with one of two servers behind a partition (MariaDB)', () => {
  let pnet: PartitionNet;
  const servers: ServerInstance[] = [];
  const remoteUrls: string[] = [];
  let dir: string;

  beforeAll(async () => {
    pnet = createPartitionNet({ links: 3 });
    const started = await Promise.all([0, 1].map(() => partitionServer('mysql', pnet)));
    for (const [i, { server, remoteUrl }] of started.entries()) {
      servers.push(server);
      remoteUrls.push(remoteUrl);
      const knex = connect(server.url, { poolMax: 1 });
      await migrate(knex, { segments: false, tickets: { increment: 2, offset: i + 1 } });
      await knex.destroy();
    }
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-partition-ticket-'));
  });
  afterAll(async () => {
    pnet?.destroy();
    await Promise.all(servers.map((s) => s.destroy()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a partitioned server leaves the rotation within statementTimeoutMs and rejoins after the heal; no call fails; 0 duplicates', async () => {
    const stopFile = path.join(dir, 'stop');
    const workers = pnet.links.map((link: Link, i) => {
      const out = path.join(dir, `p${i}.bin`);
      const cfg = { urls: remoteUrls, out, stopFile, callers: 4, ...BOUNDS };
      const child = link.spawn(process.execPath, [builtWorker(WORKER), JSON.stringify(cfg)], {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const w = { name: `p${i}`, out, child, log: '' };
      child.stdout!.on('data', (d: Buffer) => (w.log += d));
      child.stderr!.on('data', (d: Buffer) => (w.log += d));
      return w;
    });
    const dump = () => workers.map((w) => `--- ${w.name}\n${w.log.replace(/progress \d+\n/g, '')}`).join('\n');
    const seen = async (w: (typeof workers)[number], re: RegExp, from = 0) => {
      for (const until = Date.now() + STEP_MS; ; await sleep(10)) {
        const m = w.log.slice(from).match(re);
        if (m) return m;
        if (w.child.exitCode !== null || Date.now() > until) throw new Error(`${w.name}: no ${re}\n${dump()}`);
      }
    };
    await Promise.all(workers.map((w) => seen(w, /serving/)));
    await sleep(500);

    const portA = servers[0]!.port;
    pnet.links[0]!.cut('both', { port: portA });
    pnet.links[1]!.cut('from-server', { port: portA });
    const cutAt = Date.now();
    const logAtCut = workers.map((w) => w.log.length);
    const down = await Promise.all([0, 1].map((i) => seen(workers[i]!, /event down (\S+) (\d+)/, logAtCut[i])));
    await sleep(cutAt + CUT_MS - Date.now());
    const logAtHeal = workers.map((w) => w.log.length);
    pnet.links[0]!.heal();
    pnet.links[1]!.heal();
    const healAt = Date.now();
    const up = await Promise.all([0, 1].map((i) => seen(workers[i]!, /event server-up (\S+) (\d+)/, logAtHeal[i])));
    await sleep(1_000);

    const stopAt = Date.now();
    writeFileSync(stopFile, '');
    const summaries = await Promise.all(workers.map((w) => seen(w, /\{"ids".*\}/).then((m) => JSON.parse(m[0]) as Summary)));
    await Promise.all(workers.map((w) => new Promise((r) => (w.child.exitCode !== null ? r(null) : w.child.once('exit', r)))));
    const endedMs = Date.now() - stopAt;

    // Every ID counted: no duplicate, each in a server's class (1 or 2 mod 2 is every positive ID; the
    // allocator itself refuses one outside its server's class), and A issued again after the heal.
    const files = workers.map((w) => readIds(w.out));
    const everything = new Set<bigint>();
    let total = 0;
    for (const ids of files) {
      for (const id of ids) everything.add(id);
      total += ids.length;
    }
    expect(total - everything.size, 'duplicates').toBe(0);
    expect(summaries.map((s) => s.ids)).toEqual(files.map((f) => f.length));

    const downAfterCutMs = down.map((m) => Number(m[2]) - cutAt);
    const upAfterHealMs = up.map((m) => Number(m[2]) - healAt);
    // The server taken out is A (the first server), and only A; never refused; p2 saw nothing.
    for (const m of [...down, ...up]) expect(m[1], dump()).toBe(down[0]![1]);
    expect(dump()).not.toMatch(/event refused/);
    expect(workers[2]!.log, 'p2 was never cut').not.toMatch(/event/);
    expect(Math.max(...downAfterCutMs)).toBeLessThan(BOUNDS.statementTimeoutMs + SLACK_MS + 1_000);
    expect(Math.max(...upAfterHealMs)).toBeLessThan(BACK_WITHIN_MS);
    // No call failed: B served every call A could not; the slowest call waited out one statement bound on A.
    for (const s of summaries) {
      expect(s.untyped).toBe(0);
      expect(s.errors, dump()).toEqual({});
      expect(s.maxCallMs).toBeLessThan(BOUNDS.statementTimeoutMs + SLACK_MS + 1_000);
      expect(s.perServer.every((n) => n > 0)).toBe(true);
    }
    console.log(
      JSON.stringify({
        ids: total,
        duplicates: total - everything.size,
        perServer: summaries.map((s) => s.perServer),
        downAfterCutMs,
        upAfterHealMs,
        maxCallMs: summaries.map((s) => s.maxCallMs),
        cutMs: healAt - cutAt,
        endedMs,
        closeMs: summaries.map((s) => s.closeMs),
        destroyMs: summaries.map((s) => s.destroyMs),
      }),
    );
  }, 90_000);
});
