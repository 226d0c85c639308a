/**
 * One snowflake "process" behind a partitionable link (test/partition/snowflake.test.ts): takes
 * IDs with a 1-worker-bit layout until SIGTERM and appends each batch (int64 little endian) to
 * a file as soon as it is handed out, so the file is exactly what this process issued.
 *
 * Prints the lines the test synchronises on and judges: `claimed|renewed|lost <workerId>`,
 * `serving <workerId>` (first ID after start or after a failure), `fail <code> <ms>` for every
 * failed call with how long it took, `untyped <message>` for a failure that is not an
 * IdleaseError; at exit one JSON line { ids, untyped, closeMs, destroyMs }.
 *
 *   ip netns exec <ns> node --import tsx test/partition/snowflake-worker.ts '<json config>'
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { PARTITION_LAYOUT } from './layout.js';
import { snowflakeWorkerArgs } from '../helpers/snowflake-worker-args.js';

const { cfg, stopping } = snowflakeWorkerArgs();
const say = (line: string) => process.stdout.write(`${line}\n`);
const fd = openSync(cfg.out, 'a');
// A connect bound: while the link is cut a new connection's SYN is dropped too, and pg waits
// for the kernel (minutes) by default.
const knex = connect(cfg.url, { poolMax: 2, connectTimeoutMs: 1_000 });
const alloc = createSnowflakeAllocator({
  knex,
  group: 'partition',
  layout: PARTITION_LAYOUT,
  leaseTtlMs: cfg.leaseTtlMs,
  maxLeadMs: cfg.maxLeadMs,
  waitTimeoutMs: cfg.waitTimeoutMs,
});
alloc.onEvent((e) => {
  if (e.type === 'claimed' || e.type === 'lost' || e.type === 'renewed') say(`${e.type} ${e.workerId}`);
  if (e.type === 'lease-error') say(`lease-error ${String((e.error as { code?: unknown }).code)}`);
});
let ids = 0;
let untyped = 0;
let failing = true;
while (!stopping()) {
  const t0 = performance.now();
  try {
    const batch = await alloc.nextBatch(4);
    writeSync(fd, new Uint8Array(new BigInt64Array(batch).buffer));
    ids += batch.length;
    if (failing) say(`serving ${alloc.workerId}`);
    failing = false;
  } catch (err) {
    failing = true;
    const ms = Math.round(performance.now() - t0);
    if (isIdleaseError(err)) say(`fail ${err.code} ${ms}`);
    else {
      untyped++;
      say(`untyped ${String((err as Error)?.message)}`);
    }
  }
  // A service's pace, not a flood: the event loop turns and the files stay small.
  await new Promise((r) => setTimeout(r, 2));
}
closeSync(fd);
const t0 = performance.now();
await alloc.close();
const closeMs = Math.round(performance.now() - t0);
// knex waits for every connection it lent out: one whose statement the allocator gave up on
// behind the cut is busy until TCP retransmits it after the heal. Measured apart from close().
await knex.destroy();
say(JSON.stringify({ ids, untyped, closeMs, destroyMs: Math.round(performance.now() - t0) - closeMs }));
