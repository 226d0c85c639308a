/**
 * One inserting "process" behind a partitionable link (test/partition/next-id.test.ts): single-row
 * autocommit INSERTs into a table whose id is `DEFAULT <schema>.next_id()`, through pg, each
 * bounded by the app's own deadline (next_id() runs inside the INSERT: idlease has no client-side
 * part to bound it). Every answered INSERT's (n, id) is appended to a file as text lines; every
 * unanswered one is counted by how it ended. Until the stop file appears; at exit one JSON line
 * { inserted, attempts, failed: { reason: n }, maxFailMs, untyped }.
 *
 *   ip netns exec <ns> node --import tsx test/partition/next-id-worker.ts '<json config>'
 */
import { appendFileSync, existsSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { withDeadline } from '../../src/runtime/deadline.js';

interface Config {
  url: string;
  schema: string;
  who: string;
  out: string;
  stopFile: string;
  statementTimeoutMs: number;
}
const cfg = JSON.parse(process.argv[2] ?? '{}') as Config;
const say = (line: string) => process.stdout.write(`${line}\n`);
const knex = connect(cfg.url, { poolMax: 2, connectTimeoutMs: cfg.statementTimeoutMs });
const failed: Record<string, number> = {};
let inserted = 0;
let attempts = 0;
let maxFailMs = 0;
let lines: string[] = [];
const flush = () => {
  if (lines.length > 0) appendFileSync(cfg.out, lines.join(''));
  lines = [];
};
for (let n = 1; !(n % 32 === 0 && existsSync(cfg.stopFile)); n++) {
  attempts++;
  const t0 = performance.now();
  try {
    const r = await withDeadline(
      knex.raw(`INSERT INTO ${cfg.schema}.orders (who, n) VALUES (?, ?) RETURNING id::text AS id`, [cfg.who, n]),
      cfg.statementTimeoutMs,
    );
    lines.push(`${n} ${(r as { rows: { id: string }[] }).rows[0]!.id}\n`);
    if (++inserted === 1) say('serving');
    if (lines.length >= 64) flush();
  } catch (err) {
    maxFailMs = Math.max(maxFailMs, Math.round(performance.now() - t0));
    // The fate of an INSERT whose answer never came is unknown here: it may have committed.
    const reason = /did not answer within/.test(String((err as Error)?.message))
      ? 'deadline'
      : String((err as { code?: unknown }).code ?? 'other');
    failed[reason] = (failed[reason] ?? 0) + 1;
    flush();
    await new Promise((r) => setTimeout(r, 50));
  }
  await new Promise((r) => setTimeout(r, 2));
}
flush();
say(JSON.stringify({ inserted, attempts, failed, maxFailMs }));
// knex.destroy() would wait for a connection still busy with an INSERT given up on: not ours to wait for here.
void knex.destroy();
process.exit(0);
