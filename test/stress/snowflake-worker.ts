/**
 * One snowflake "process" for the stress test: takes IDs with a 2-worker-bit layout and appends
 * them (int64 little endian) to a file after every batch of 16, so a SIGKILL loses at most a batch
 * that was never handed out. Prints `started <Date.now()>` (the test checks a faketime'd clock
 * really is shifted) and `claimed|renewed|lost <id>`, the lines the test synchronises on. Waits
 * (and retries) while every worker id is held. Runs until killed or SIGTERMed (then closes,
 * giving its id back).
 *
 *   node --import tsx test/stress/snowflake-worker.ts '<json config>'
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { STRESS_LAYOUT } from './snowflake-layout.js';
import { snowflakeWorkerArgs } from '../helpers/snowflake-worker-args.js';

const { cfg, stopping } = snowflakeWorkerArgs();
// Appending to a file the test created: it exists even if this process dies before its first batch.
const fd = openSync(cfg.out, 'a');
const knex = connect(cfg.url, { poolMax: 2 });
const alloc = createSnowflakeAllocator({
  knex,
  group: 'stress',
  layout: STRESS_LAYOUT,
  leaseTtlMs: cfg.leaseTtlMs,
  maxLeadMs: cfg.maxLeadMs,
  waitTimeoutMs: cfg.waitTimeoutMs,
});
alloc.onEvent((e) => {
  if (e.type === 'claimed' || e.type === 'lost' || e.type === 'renewed') process.stdout.write(`${e.type} ${e.workerId}\n`);
  if (e.type === 'lease-error') {
    const err = e.error as { code?: unknown; message?: unknown };
    process.stdout.write(`lease-error ${String(err.code)} ${String(err.message).split('\n').pop()}\n`);
  }
});
process.stdout.write(`started ${Date.now()}\n`);
while (!stopping()) {
  try {
    const ids = await alloc.nextBatch(16);
    writeSync(fd, new Uint8Array(new BigInt64Array(ids).buffer));
  } catch (err) {
    // Waiting for a free id is this test's normal state (the lease expiring between a failed
    // claim and the count of live holders reports DB_UNAVAILABLE instead); anything else fails.
    if (!isIdleaseError(err, 'NO_WORKER_ID') && !isIdleaseError(err, 'DB_UNAVAILABLE')) throw err;
    process.stdout.write(`waiting ${err.code}\n`);
  }
  // A service's pace, not a flood: keeps the files (and the duplicate check) small.
  await new Promise((r) => setTimeout(r, 2));
}
closeSync(fd);
await alloc.close();
await knex.destroy();
