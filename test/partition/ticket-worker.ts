/**
 * One ticket "process" behind a partitionable link (test/partition/ticket.test.ts): `callers`
 * concurrent loops of next() on one allocator over every server, until the stop file appears.
 * Each ID is recorded (int64 little endian, test/helpers/id-file.ts) with the offset of the
 * server it came from (by residue) counted.
 *
 * Prints `event <type> <server> <epoch ms>` for every server-down / server-up / refused event
 * and `serving` once each server has issued; at exit one JSON line
 * { ids, perServer, errors: { CODE: n }, untyped, maxFailMs, maxCallMs, closeMs, destroyMs }.
 *
 *   ip netns exec <ns> node --import tsx test/partition/ticket-worker.ts '<json config>'
 */
import { existsSync } from 'node:fs';
import { connect } from '../../src/connect.js';
import { isIdleaseError } from '../../src/errors.js';
import { createTicketAllocator } from '../../src/ticket/index.js';
import { idFile } from '../helpers/id-file.js';

interface Config {
  urls: string[];
  out: string;
  stopFile: string;
  callers: number;
  statementTimeoutMs: number;
  timeoutMs: number;
  backoffMaxMs: number;
}
const cfg = JSON.parse(process.argv[2] ?? '{}') as Config;
const say = (line: string) => process.stdout.write(`${line}\n`);
const knexes = cfg.urls.map((url) => connect(url, { poolMax: 1, connectTimeoutMs: cfg.statementTimeoutMs }));
const tickets = createTicketAllocator({
  servers: knexes.map((knex, i) => ({ knex, offset: i + 1 })),
  statementTimeoutMs: cfg.statementTimeoutMs,
  timeoutMs: cfg.timeoutMs,
  backoffInitialMs: 100,
  backoffMaxMs: cfg.backoffMaxMs,
  connectionsPerServer: cfg.callers,
  onEvent: (e) => {
    if (e.type !== 'timeout') say(`event ${e.type === 'server-down' ? e.health : e.type} ${e.server} ${Date.now()}`);
  },
});
const file = idFile(cfg.out, 256);
const perServer = cfg.urls.map(() => 0);
const errors: Record<string, number> = {};
let untyped = 0;
let maxFailMs = 0;
let maxCallMs = 0;
let announced = false;
let stopping = false;
const stopCheck = setInterval(() => (stopping = existsSync(cfg.stopFile)), 20);

async function caller(): Promise<void> {
  while (!stopping) {
    const t0 = performance.now();
    try {
      const id = await tickets.next();
      file.put(id);
      perServer[Number((id - 1n) % BigInt(cfg.urls.length))]!++;
      if (!announced && perServer.every((n) => n > 0)) {
        announced = true;
        say('serving');
      }
    } catch (err) {
      maxFailMs = Math.max(maxFailMs, Math.round(performance.now() - t0));
      if (isIdleaseError(err)) errors[err.code] = (errors[err.code] ?? 0) + 1;
      else {
        untyped++;
        say(`untyped ${String((err as Error)?.message)}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    maxCallMs = Math.max(maxCallMs, Math.round(performance.now() - t0));
    // A service's pace: each caller draws about 500 IDs a second at most.
    await new Promise((r) => setTimeout(r, 2));
  }
}

await Promise.all(Array.from({ length: cfg.callers }, caller));
clearInterval(stopCheck);
file.close();
let t0 = performance.now();
await tickets.close();
const closeMs = Math.round(performance.now() - t0);
t0 = performance.now();
await Promise.all(knexes.map((k) => k.destroy()));
const destroyMs = Math.round(performance.now() - t0);
say(JSON.stringify({ ids: file.count, perServer, errors, untyped, maxFailMs, maxCallMs, closeMs, destroyMs }));
process.exit(0);
