/**
 * One snowflake HA "process" (test/helpers/snowflake-failover-scenario.ts): takes IDs with a
 * 1-worker-bit layout (two ids, so processes started after a failover must take ids the old ones
 * held) until a stop file appears, appends them (int64, little endian) to a file, and keeps going
 * through failures, counting each error by code. Prints `first` at its first ID and one JSON
 * line at the end: { ids, errors: { CODE: n }, untyped, claims: [{ workerId, at }], failoverWaits,
 * lost, waitMs, log: ['<ms> <event> <workerId>'], leaseErrors }.
 *
 *   node --import tsx test/ha/snowflake-ha-worker.ts '<json config>'
 */
import { closeSync, existsSync, openSync, writeSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { SNOWFLAKE_HA_LAYOUT } from './snowflake-ha-layout.js';
import { stopRequested } from '../helpers/stop-file.js';

interface WorkerConfig {
  url: string;
  out: string;
  stopFile: string;
  leaseTtlMs: number;
  maxLeadMs: number;
  waitTimeoutMs: number;
  /** Wait for this file before the first call (loaded ahead, as in test/ha/segment-ha-worker.ts). */
  goFile?: string;
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
const knex = connect(cfg.url, { poolMax: 2, connectTimeoutMs: 1_000 });
const claims: Array<{ workerId: number; at: number }> = [];
let waitMs = 0;
// Every event but `renewed` and `lease-error` (counted), with its time: what a post-mortem of the run needs.
const log: string[] = [];
let leaseErrors = 0;
const alloc = createSnowflakeAllocator({
  knex,
  group: 'ha',
  layout: SNOWFLAKE_HA_LAYOUT,
  leaseTtlMs: cfg.leaseTtlMs,
  maxLeadMs: cfg.maxLeadMs,
  waitTimeoutMs: cfg.waitTimeoutMs,
  onEvent: (e) => {
    if (e.type === 'lease-error') leaseErrors++;
    else if (e.type !== 'renewed') log.push(`${Date.now()} ${e.type}${'workerId' in e ? ` ${e.workerId}` : ''}`);
    if (e.type === 'claimed') claims.push({ workerId: e.workerId, at: Date.now() });
    if (e.type === 'failover-wait') waitMs = e.waitMs;
  },
});
const fd = openSync(cfg.out, 'w');
// (A stop file ends the wait too: no worker outlives a test that failed before its go.)
while (cfg.goFile && !existsSync(cfg.goFile) && !stopRequested(cfg.stopFile)) await new Promise((r) => setTimeout(r, 5));
let ids = 0;
let untyped = 0;
const errors: Record<string, number> = {};
while (!stopRequested(cfg.stopFile)) {
  try {
    const batch = await alloc.nextBatch(16);
    writeSync(fd, new Uint8Array(new BigInt64Array(batch).buffer));
    if (ids === 0) process.stdout.write('first\n');
    ids += batch.length;
  } catch (err) {
    if (isIdleaseError(err)) errors[err.code] = (errors[err.code] ?? 0) + 1;
    else {
      untyped++;
      process.stderr.write(`${String(err)}\n`);
    }
  }
  // A service's pace, not a flood: keeps the files (and the duplicate check) small.
  await new Promise((r) => setTimeout(r, 2));
}
closeSync(fd);
const { failoverWaits, lost } = alloc.stats();
await alloc.close();
await knex.destroy().catch(() => undefined);
process.stdout.write(`${JSON.stringify({ ids, errors, untyped, claims, failoverWaits, lost, waitMs, log, leaseErrors })}\n`);
