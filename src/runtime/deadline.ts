import { SYSTEM_CLOCK, wakeableSleep, type Clock } from './clock.js';

/*
 * Every "this did not answer within N ms" of idlease lives here. Pick one on purpose:
 * - withDeadline: a database statement whose caller may be starving the event loop (leases).
 * - within: many short bounded calls at a high rate (ticket draws): one shared watchdog.
 * - beforeDeadline: a plain timer that rejects; one-off calls (connect).
 * - settlesWithin: wait for something at most N ms and go on either way (close, drain).
 */

/**
 * A statement deadline that tolerates a starved event loop. A caller spinning on
 * `await next()` runs only microtasks, so the answer to a background lease can sit in the
 * socket for seconds; when the loop finally turns, timers run before I/O and a plain
 * timeout (knex's .timeout()) would fail a statement that already succeeded. Here the
 * timer only arms a check that runs after the I/O phase (setImmediate).
 *
 * The statement itself is not cancelled: it may still run later, which only abandons the range
 * it leases (forward reservation: nobody else can be handed it), or the worker-id claim or
 * renewal nobody waits for any more (the id idles until its lease expires). `bound` names the
 * setting behind `ms` in the error.
 */
export function withDeadline<T>(query: PromiseLike<T>, ms: number, bound = 'statementTimeoutMs'): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(new Error(`statement did not answer within ${ms} ms (${bound})`));
      });
    }, ms);
    query.then(
      (v) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

/** What `within` rejects with when the bound passes first. */
export class Timeout extends Error {}

/**
 * Bounded waits without a timer per call: one watchdog sweeps the pending deadlines every
 * 25 ms (so a bound is kept to within 25 ms). A timer per ID cost a visible share of
 * throughput against the raw driver loop. Each deadline is on its caller's clock (monotonic
 * time), so a test that drives a clock by hand moves these bounds too.
 */
const pending = new Set<{ clock: Clock; deadline: number; fail: () => void }>();
let watchdog: NodeJS.Timeout | undefined;

function sweep(): void {
  for (const p of pending) if (p.deadline <= p.clock.monoMs()) p.fail();
  if (pending.size === 0 && watchdog) {
    clearInterval(watchdog);
    watchdog = undefined;
  }
}

export function within<T>(p: Promise<T>, ms: number, what: string, clock: Clock = SYSTEM_CLOCK): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const entry = {
      clock,
      deadline: clock.monoMs() + ms,
      fail: () => {
        pending.delete(entry);
        reject(new Timeout(`${what} did not answer within ${ms} ms`));
      },
    };
    pending.add(entry);
    if (!watchdog) {
      watchdog = setInterval(sweep, 25);
      watchdog.unref();
    }
    p.then(
      (v) => {
        pending.delete(entry);
        resolve(v);
      },
      (e: unknown) => {
        pending.delete(entry);
        reject(e);
      },
    );
  });
}

/** `p`, or the error `late()` makes if `ms` pass first. The timer is cleared when `p` settles and never keeps the process alive. */
export function beforeDeadline<T>(p: PromiseLike<T>, ms: number, late: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(late()), ms);
    timer.unref();
    p.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

/** Wait for `p` to settle, at most `ms` (on `clock`); true if it did. Never rejects; the timer is cleared when `p` settles. */
export async function settlesWithin(p: PromiseLike<unknown>, ms: number, clock: Clock = SYSTEM_CLOCK, unref = false): Promise<boolean> {
  const timer = wakeableSleep(clock, ms, unref);
  const settled = Promise.resolve(p).then(
    () => true,
    () => true,
  );
  try {
    return await Promise.race([settled, timer.done.then(() => false)]);
  } finally {
    timer.wake();
  }
}
