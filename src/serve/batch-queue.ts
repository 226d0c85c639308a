/**
 * Where batch requests (`/v1/…/ids?n=N`) wait their turn. A 10,000-ID batch is ~11 ms of one
 * core; node emits every request that arrived in one poll at once, so 100 sockets each sending
 * one made /healthz wait 2.57 s behind them (and 1,000 sockets 25 s). Here a batch starts only at
 * its turn, one per event-loop turn, so whatever else arrived (a /healthz, a single ID) is
 * answered between two batches; turns go round the client addresses, so one address's queue
 * never stands in front of another's next batch.
 *
 * The IDs waiting are one global budget (`maxQueuedIds`, default 50 batches of 10,000) and no
 * address may hold more than a quarter of it: over either, the batch is answered
 * `503 BUSY + Retry-After: 1` at once instead of joining an unbounded queue. An address within
 * its fair share (the budget over the addresses waiting) is still queued when others spent it.
 */
import type { Counter } from 'prom-client';
import { HttpError } from './http-errors.js';

export const DEFAULT_MAX_QUEUED_IDS = 500_000;

interface Waiting {
  readonly ids: number;
  readonly go: () => void;
}

export function createBatchQueue(maxQueuedIds: number, refused: Counter<'reason'>) {
  const byAddress = new Map<string, { ids: number; jobs: Waiting[] }>();
  let queuedIds = 0;
  let scheduled = false;
  const perAddress = Math.max(1, Math.floor(maxQueuedIds / 4));

  function busy(reason: string): Promise<never> {
    refused.inc({ reason });
    return Promise.reject(
      // connection: close — the requests this client pipelined behind are not answered one 503 each.
      new HttpError(503, 'BUSY', 'Too many IDs are queued or unread for batches right now; retry in a second.', {
        'retry-after': '1',
        connection: 'close',
      }),
    );
  }

  function tick(): void {
    scheduled = false;
    const first = byAddress.entries().next();
    if (first.done === true) return;
    const [address, q] = first.value;
    const job = q.jobs.shift()!;
    q.ids -= job.ids;
    queuedIds -= job.ids;
    // The address goes to the back of the round.
    byAddress.delete(address);
    if (q.jobs.length > 0) byAddress.set(address, q);
    if (byAddress.size > 0) {
      scheduled = true;
      setImmediate(tick);
    }
    job.go();
  }

  return {
    /** Resolves at this batch's turn; rejects with 503 BUSY when the budget is spent (or `pipelineFull`: its connection holds its share of unread answers). */
    turn(address: string, ids: number, pipelineFull = false): Promise<void> {
      if (pipelineFull) return busy('held_per_connection');
      let q = byAddress.get(address);
      const mine = (q?.ids ?? 0) + ids;
      // An address within its fair share of the budget is queued even when the others spent it:
      // a well-behaved client is not refused because of a greedy one (the overshoot is bounded by one share per address).
      const fairShare = maxQueuedIds / (byAddress.size + (q === undefined ? 1 : 0));
      const over = mine > perAddress ? 'per_address' : queuedIds + ids > maxQueuedIds && mine > fairShare ? 'global' : undefined;
      if (over !== undefined) return busy(`queued_ids_${over}`);
      if (q === undefined) byAddress.set(address, (q = { ids: 0, jobs: [] }));
      q.ids += ids;
      queuedIds += ids;
      const wait = new Promise<void>((resolve) => q.jobs.push({ ids, go: resolve }));
      if (!scheduled) {
        scheduled = true;
        setImmediate(tick);
      }
      return wait;
    },
    get queuedIds(): number {
      return queuedIds;
    },
  };
}

export type BatchQueue = ReturnType<typeof createBatchQueue>;
