/**
 * One HA "process": takes IDs for a tag until a stop file appears, appends them (int64,
 * little endian) to a file, and keeps going through failures, counting each error by code.
 * Prints one JSON line at the end: { ids, errors: { CODE: n }, causes: { errno: n }, leaseErrors:
 * { errno: n }, untyped, maxFailMs, regressions, leases, failoverJumps, idsAtMark }. `causes` counts the database errno
 * behind failed calls, `maxFailMs` is the longest a failed call took, `leaseErrors` the errno of every failed lease attempt (retried in the
 * background), `idsAtMark` the IDs drawn when the optional mark file first appeared.
 *
 *   node --import tsx test/ha/segment-ha-worker.ts '<json config>'
 */
import { closeSync, existsSync, openSync, writeSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { createSegmentAllocator } from '../../src/segment/index.js';
import { stopRequested } from '../helpers/stop-file.js';

interface WorkerConfig {
  url: string;
  tag: string;
  out: string;
  stopFile: string;
  maxStep: number;
  markFile?: string;
  waitTimeoutMs?: number;
  statementTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** A pause after every call, ms: a service's pace instead of flat out (fewer IDs to record and count). */
  pauseMs?: number;
  /** How long one lease should last (default 50 ms: a lease every few calls). Production-like: seconds, so a process holds seconds of IDs in memory. */
  targetLeaseMs?: number;
  /**
   * Wait for this file before the first call: the process is started (and its code loaded) ahead,
   * so that its first lease goes out within milliseconds of the file appearing, as a process
   * already starting when a router moves would.
   */
  goFile?: string;
}

const cfg = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
const knex = connect(cfg.url, { poolMax: 2, connectTimeoutMs: cfg.connectTimeoutMs });
const leaseErrors: Record<string, number> = {};
const errnoOf = (err: unknown): string =>
  String((err as { errno?: unknown } | null)?.errno ?? (err as { code?: unknown } | null)?.code ?? 'other');
const alloc = createSegmentAllocator({
  knex,
  tag: cfg.tag,
  maxStep: cfg.maxStep,
  targetLeaseMs: cfg.targetLeaseMs ?? 50,
  statementTimeoutMs: cfg.statementTimeoutMs ?? 2_000,
  waitTimeoutMs: cfg.waitTimeoutMs ?? 3_000,
  onEvent: (e) => {
    if (e.type === 'lease-error') leaseErrors[errnoOf(e.error)] = (leaseErrors[errnoOf(e.error)] ?? 0) + 1;
  },
});
const fd = openSync(cfg.out, 'w');
// (A stop file ends the wait too: no worker outlives a test that failed before its go.)
while (cfg.goFile && !existsSync(cfg.goFile) && !stopRequested(cfg.stopFile)) await new Promise((r) => setTimeout(r, 5));
const buf = new BigInt64Array(256);
let n = 0;
let ids = 0;
const errors: Record<string, number> = {};
const causes: Record<string, number> = {};
let untyped = 0;
let maxFailMs = 0;
let idsAtMark: number | undefined;
const flush = () => {
  writeSync(fd, new Uint8Array(buf.buffer, 0, n * 8));
  n = 0;
};
// The mark is looked for every 64 rounds, or after 20 ms without a look: a process on a node that
// draws slowly (a loaded machine starves one Galera node) went 300 ms without reaching a 64th
// round, missed the mark before its node was killed, and the test read no count for it.
let markLookedAt = performance.now();
for (let round = 0; !(round % 64 === 0 && stopRequested(cfg.stopFile)); round++) {
  if (idsAtMark === undefined && cfg.markFile && (round % 64 === 0 || performance.now() - markLookedAt > 20)) {
    markLookedAt = performance.now();
    if (existsSync(cfg.markFile)) idsAtMark = ids;
  }
  const t0 = performance.now();
  try {
    const got = round % 8 === 0 ? await alloc.nextBatch(1 + (round % 50)) : [await alloc.next()];
    if (ids === 0) process.stdout.write('first\n');
    for (const id of got) {
      buf[n++] = id;
      ids++;
      if (n === buf.length) flush();
    }
    // Yield now and then, as a server would between requests: the background lease runs.
    if (cfg.pauseMs) await new Promise((r) => setTimeout(r, cfg.pauseMs));
    else if (round % 16 === 0) await new Promise((r) => setImmediate(r));
  } catch (err) {
    maxFailMs = Math.max(maxFailMs, Math.round(performance.now() - t0));
    if (isIdleaseError(err)) {
      errors[err.code] = (errors[err.code] ?? 0) + 1;
      if (err.cause !== undefined) causes[errnoOf(err.cause)] = (causes[errnoOf(err.cause)] ?? 0) + 1;
    } else untyped++;
    await new Promise((r) => setTimeout(r, 20));
  }
}
flush();
closeSync(fd);
const { regressions, leases, failoverJumps } = alloc.stats();
await alloc.close().catch(() => undefined);
await knex.destroy().catch(() => undefined);
process.stdout.write(
  JSON.stringify({ ids, errors, causes, leaseErrors, untyped, maxFailMs, regressions, leases, failoverJumps, idsAtMark }) + '\n',
);
process.exit(0);
