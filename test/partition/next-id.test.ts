/**
 * next_id() as a column DEFAULT under a partition (PostgreSQL): three OS processes, each in a
 * network namespace of its own, insert single rows flat out into one table whose id is
 * `DEFAULT shard_1.next_id()` — with no unique constraint, so a repeated ID would be stored, not
 * refused. p0 is cut off both ways and p1 loses only the server's answers, in the middle of their
 * INSERTs; p2 is not cut. Then the heal:
 *   - every INSERT a process was answered for is in the table, once, with its id;
 *   - an INSERT whose answer was lost either committed (its row is there: the app cannot know
 *     until it looks) or never ran; those that committed are counted, and carry IDs no other row has;
 *   - no ID twice in the table; the cut processes insert again after the heal without restart.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';
import { createPartitionNet, type PartitionNet } from '../helpers/partition.js';
import type { ServerInstance } from '../helpers/servers.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { partitionServer } from './servers.js';
import { sleep } from '../helpers/wait.js';

const WORKER = path.join(REPO_ROOT, 'test/partition/next-id-worker.ts');
/** The app's bound on one INSERT (the worker's): next_id() has no client-side part of its own. */
const STATEMENT_TIMEOUT_MS = 1_000;
const CUT_MS = 5_000;
const SLACK_MS = 500;
/** Back within: the INSERT in flight given up at its bound, a connect at the same bound, slack. */
const BACK_WITHIN_MS = 2 * STATEMENT_TIMEOUT_MS + 2 * SLACK_MS + 1_000;
const STEP_MS = 20_000;

describe('next_id() inserts behind a partitionable link (PostgreSQL)', () => {
  let pnet: PartitionNet;
  let server: ServerInstance;
  let remoteUrl: string;
  let knex: Knex;
  let dir: string;

  beforeAll(async () => {
    pnet = createPartitionNet({ links: 3 });
    ({ server, remoteUrl } = await partitionServer('postgres', pnet));
    knex = connect(server.url, { poolMax: 2 });
    await migrate(knex, { segments: false, nextId: { schema: 'shard_1', shard: 1 } });
    await knex.raw(`CREATE TABLE shard_1.orders (id bigint NOT NULL DEFAULT shard_1.next_id(), who text NOT NULL, n int NOT NULL)`);
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-partition-next-id-'));
  });
  afterAll(async () => {
    pnet?.destroy();
    await knex?.destroy();
    await server?.destroy();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('cut mid-INSERT both ways and answers-only: every answered row there once, lost answers counted, no ID twice, back after the heal', async () => {
    const stopFile = path.join(dir, 'stop');
    const workers = pnet.links.map((link, i) => {
      const out = path.join(dir, `p${i}.txt`);
      writeFileSync(out, '');
      const cfg = { url: remoteUrl, schema: 'shard_1', who: `p${i}`, out, stopFile, statementTimeoutMs: STATEMENT_TIMEOUT_MS };
      const child: ChildProcess = link.spawn(process.execPath, [builtWorker(WORKER), JSON.stringify(cfg)], {
        cwd: REPO_ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const w = { name: `p${i}`, out, child, log: '' };
      child.stdout!.on('data', (d: Buffer) => (w.log += d));
      child.stderr!.on('data', (d: Buffer) => (w.log += d));
      return w;
    });
    const dump = () => workers.map((w) => `--- ${w.name}\n${w.log}`).join('\n');
    const seen = async (w: (typeof workers)[number], re: RegExp) => {
      for (const until = Date.now() + STEP_MS; ; await sleep(10)) {
        const m = w.log.match(re);
        if (m) return m;
        if (w.child.exitCode !== null || Date.now() > until) throw new Error(`${w.name}: no ${re}\n${dump()}`);
      }
    };
    await Promise.all(workers.map((w) => seen(w, /serving/)));
    await sleep(500);
    const rowsOf = async (who: string) =>
      Number((await knex.raw(`SELECT count(*) AS c FROM shard_1.orders WHERE who = ?`, [who])).rows[0].c);

    pnet.links[0]!.cut();
    pnet.links[1]!.cut('from-server');
    const cutAt = Date.now();
    await sleep(CUT_MS);
    const atHeal = [await rowsOf('p0'), await rowsOf('p1')];
    pnet.links[0]!.heal();
    pnet.links[1]!.heal();
    const healAt = Date.now();
    const backAfterMs: number[] = [];
    for (const [i, who] of ['p0', 'p1'].entries()) {
      while ((await rowsOf(who)) <= atHeal[i]! + 5) {
        if (Date.now() - healAt > 30_000) throw new Error(`${who} inserted nothing for 30 s after the heal\n${dump()}`);
        await sleep(20);
      }
      backAfterMs[i] = Date.now() - healAt;
    }
    await sleep(500);
    writeFileSync(stopFile, '');
    const summaries = await Promise.all(
      workers.map((w) =>
        seen(w, /\{"inserted".*\}/).then(
          (m) => JSON.parse(m[0]) as { inserted: number; attempts: number; failed: Record<string, number>; maxFailMs: number },
        ),
      ),
    );
    await Promise.all(workers.map((w) => new Promise((r) => (w.child.exitCode !== null ? r(null) : w.child.once('exit', r)))));

    // No ID twice in the whole table, answered or not.
    const { total, distinct } = (await knex.raw(`SELECT count(*)::int AS total, count(DISTINCT id)::int AS distinct FROM shard_1.orders`))
      .rows[0] as { total: number; distinct: number };
    expect(total - distinct, 'IDs stored twice').toBe(0);
    const table = new Map<string, Map<number, string>>();
    for (const r of (await knex.raw(`SELECT who, n, id::text AS id FROM shard_1.orders`)).rows as {
      who: string;
      n: number;
      id: string;
    }[]) {
      if (!table.has(r.who)) table.set(r.who, new Map());
      expect(table.get(r.who)!.has(r.n), `${r.who} attempt ${r.n} stored twice`).toBe(false);
      table.get(r.who)!.set(r.n, r.id);
    }
    const committedUnanswered: number[] = [];
    for (const [i, w] of workers.entries()) {
      const answered = readFileSync(w.out, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(' ') as [string, string]);
      expect(answered.length).toBe(summaries[i]!.inserted);
      const mine = table.get(w.name) ?? new Map<number, string>();
      // Every answered INSERT is there, with the id the app was told.
      for (const [n, id] of answered) expect(mine.get(Number(n)), `${w.name} attempt ${n}`).toBe(id);
      committedUnanswered.push(mine.size - answered.length);
    }
    expect(summaries[2]!.failed, 'p2 was never cut').toEqual({});
    for (const s of summaries.slice(0, 2)) {
      expect(Object.keys(s.failed).length, dump()).toBeGreaterThan(0);
      expect(s.maxFailMs).toBeLessThanOrEqual(STATEMENT_TIMEOUT_MS + SLACK_MS);
    }
    // p1's INSERTs reached the server and ran: at least the one in flight at the cut committed unanswered.
    expect(committedUnanswered[1]).toBeGreaterThan(0);
    expect(committedUnanswered[2]).toBe(0);
    expect(Math.max(...backAfterMs)).toBeLessThan(BACK_WITHIN_MS);
    console.log(
      JSON.stringify({
        rows: total,
        duplicates: total - distinct,
        answered: summaries.map((s) => s.inserted),
        failed: summaries.map((s) => s.failed),
        committedUnanswered,
        maxFailMs: summaries.map((s) => s.maxFailMs),
        cutMs: healAt - cutAt,
        backAfterHealMs: backAfterMs,
      }),
    );
  }, 90_000);
});
