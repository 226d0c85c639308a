/**
 * One stress "process": takes IDs for a tag and appends them (int64, little endian) to a
 * file, flushing every 1024 IDs so a SIGKILL loses at most the unflushed tail. Prints
 * `progress <n>` after each flush and `done <n> <leases>` at the end.
 *
 *   node --import tsx test/stress/segment-worker.ts '<json config>'
 */
import { idFile } from '../helpers/id-file.js';
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
  knex,
  tag: cfg.tag,
  minStep: cfg.minStep,
  maxStep: cfg.maxStep,
  targetLeaseMs: cfg.targetLeaseMs,
  preloadMs: 50,
  waitTimeoutMs: 60_000,
});
const ids = idFile(cfg.out, 1024);
for (let round = 0; ids.count < cfg.count; round++) {
  if (round % 4 === 0) {
    for (const id of await alloc.nextBatch(Math.min(1 + (round % 97), cfg.count - ids.count))) ids.put(id);
  } else {
    ids.put(await alloc.next());
  }
}
ids.close();
const leases = alloc.stats().leases;
await alloc.close();
await knex.destroy();
process.stdout.write(`done ${ids.count} ${leases}\n`);
