/**
 * One pooled connection behind a partitionable link (test/partition/keepalive.test.ts):
 * connect(url, { keepAliveMs, poolMax: 1 }), one query to open the connection, `ready`; then on
 * each stdin line one more query, printing `ok <ms>` or `fail <message>`; `error <message>` when
 * the pool reports a connection error on its own (knex logs it).
 *
 *   ip netns exec <ns> node --import tsx test/partition/keepalive-worker.ts '<json config>'
 */
import { connect } from '../../src/connect.js';

const cfg = JSON.parse(process.argv[2] ?? '{}') as { url: string; keepAliveMs: number };
const say = (line: string) => process.stdout.write(`${line}\n`);
const knex = connect(cfg.url, { poolMax: 1, keepAliveMs: cfg.keepAliveMs, connectTimeoutMs: 1_000, log: (l) => say(`log ${l}`) });
await knex.raw('SELECT 1');
say('ready');
process.stdin.setEncoding('utf8');
process.stdin.on('data', () => {
  const t0 = performance.now();
  knex
    .raw('SELECT 1')
    .timeout(5_000)
    .then(
      () => say(`ok ${Math.round(performance.now() - t0)}`),
      (err: unknown) => say(`fail ${String((err as Error)?.message)}`),
    );
});
process.stdin.on('end', () => void knex.destroy().then(() => process.exit(0)));
