/**
 * One snowflake "process" for the stress test: takes IDs with a 2-worker-bit layout and appends
 * them (int64 little endian) to a file after every batch of 16, so a SIGKILL loses at most a batch
 * that was never handed out. Waits (and retries) while every worker id is held. Runs until
 * killed or SIGTERMed (then closes, giving its id back).
 *
 *   node --import tsx test/stress/snowflake-worker.ts '<json config>'
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { STRESS_LAYOUT } from './snowflake-layout.js';

const cfg = JSON.parse(process.argv[2] ?? '{}') as { url: string; out: string; leaseTtlMs: number; maxLeadMs: number };
const knex = connect(cfg.url, { poolMax: 2 });
const alloc = createSnowflakeAllocator({ knex, group: 'stress', layout: STRESS_LAYOUT, leaseTtlMs: cfg.leaseTtlMs, maxLeadMs: cfg.maxLeadMs, waitTimeoutMs: 60_000 });
alloc.onEvent((e) => {
  if (e.type === 'claimed' || e.type === 'lost') process.stdout.write(`${e.type} ${e.workerId}\n`);
});
const fd = openSync(cfg.out, 'w');
let stopping = false;
process.on('SIGTERM', () => (stopping = true));
while (!stopping) {
  try {
    const ids = await alloc.nextBatch(16);
    writeSync(fd, new Uint8Array(new BigInt64Array(ids).buffer));
  } catch (err) {
    if (!isIdleaseError(err, 'NO_WORKER_ID') && !isIdleaseError(err, 'DB_UNAVAILABLE')) throw err;
  }
  // A service's pace, not a flood: keeps the files (and the duplicate check) small.
  await new Promise((r) => setTimeout(r, 2));
}
closeSync(fd);
await alloc.close();
await knex.destroy();
