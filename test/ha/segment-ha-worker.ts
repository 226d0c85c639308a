/**
 * One HA "process": takes IDs for a tag until a stop file appears, appends them (int64,
 * little endian) to a file, and keeps going through failures, counting each error by code.
 * Prints one JSON line at the end: { ids, errors: { CODE: n }, untyped, regressions, leases }.
 *
 *   node --import tsx test/ha/segment-ha-worker.ts '<json config>'
 */
import { closeSync, existsSync, openSync, writeSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { createSegmentAllocator } from '../../src/segment/index.js';

interface WorkerConfig {
  url: string;
  tag: string;
  out: string;
  stopFile: string;
  maxStep: number;
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
const knex = connect(cfg.url, { poolMax: 2 });
const alloc = createSegmentAllocator({ knex, tag: cfg.tag, maxStep: cfg.maxStep, targetLeaseMs: 50, statementTimeoutMs: 2_000, waitTimeoutMs: 3_000 });
const fd = openSync(cfg.out, 'w');
const buf = new BigInt64Array(256);
let n = 0;
let ids = 0;
const errors: Record<string, number> = {};
let untyped = 0;
const flush = () => {
  writeSync(fd, new Uint8Array(buf.buffer, 0, n * 8));
  n = 0;
};
for (let round = 0; !(round % 64 === 0 && existsSync(cfg.stopFile)); round++) {
  try {
    const got = round % 8 === 0 ? await alloc.nextBatch(1 + (round % 50)) : [await alloc.next()];
    if (ids === 0) process.stdout.write('first\n');
    for (const id of got) {
      buf[n++] = id;
      ids++;
      if (n === buf.length) flush();
    }
    // Yield now and then, as a server would between requests: the background lease runs.
    if (round % 16 === 0) await new Promise((r) => setImmediate(r));
  } catch (err) {
    if (isIdleaseError(err)) errors[err.code] = (errors[err.code] ?? 0) + 1;
    else untyped++;
    await new Promise((r) => setTimeout(r, 20));
  }
}
flush();
closeSync(fd);
const { regressions, leases } = alloc.stats();
await alloc.close().catch(() => undefined);
await knex.destroy().catch(() => undefined);
process.stdout.write(JSON.stringify({ ids, errors, untyped, regressions, leases }) + '\n');
process.exit(0);
