/**
 * One stress "process": takes IDs for a tag and appends them (int64, little endian) to a
 * file, flushing every 1024 IDs so a SIGKILL loses at most the unflushed tail. Prints
 * `progress <n>` after each flush and `done <n> <leases>` at the end.
 *
 *   node --import tsx test/stress/segment-worker.ts '<json config>'
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { createSegmentAllocator } from '../../src/segment/index.js';

interface WorkerConfig {
  url: string;
  tag: string;
  count: number;
  out: string;
  minStep: number;
  maxStep: number;
  targetLeaseMs: number;
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
const knex = connect(cfg.url, { poolMax: 2 });
const alloc = createSegmentAllocator({
  knex, tag: cfg.tag, minStep: cfg.minStep, maxStep: cfg.maxStep, targetLeaseMs: cfg.targetLeaseMs,
  preloadMs: 50, waitTimeoutMs: 60_000,
});
const fd = openSync(cfg.out, 'w');
const buf = new BigInt64Array(1024);
let n = 0;
let done = 0;
const put = (id: bigint) => {
  buf[n++] = id;
  if (n === buf.length) {
    writeSync(fd, new Uint8Array(buf.buffer, 0, n * 8));
    n = 0;
    process.stdout.write(`progress ${done + 1}\n`);
  }
};
for (let round = 0; done < cfg.count; round++) {
  if (round % 4 === 0) {
    const ids = await alloc.nextBatch(Math.min(1 + (round % 97), cfg.count - done));
    for (const id of ids) { put(id); done++; }
  } else {
    put(await alloc.next());
    done++;
  }
}
writeSync(fd, new Uint8Array(buf.buffer, 0, n * 8));
closeSync(fd);
const leases = alloc.stats().leases;
await alloc.close();
await knex.destroy();
process.stdout.write(`done ${done} ${leases}\n`);
