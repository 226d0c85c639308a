/**
 * The suite's two ways to wait. A test waits on progress — a count reached, a port open, a server
 * answering as primary — with `waitFor`, which returns as soon as the condition holds and fails
 * naming what it waited for. `sleep` is for a pause that is itself the point (past a lease, past a
 * once-a-second bound, a load running for a while): every call says why beside it.
 */

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export interface WaitOptions {
  /** Give up after this long (default 30 s). */
  timeoutMs?: number;
  /** Time between two checks (default 50 ms). */
  intervalMs?: number;
  /**
   * What is awaited, for the failure message: "the replica to catch up", "200 IDs drawn"; a
   * function is called at the failure, to say how far things got.
   */
  what: string | (() => string);
}

/**
 * Check `cond` until it returns a truthy value (or resolves to one), then return that value. A
 * check that throws counts as not yet (a server still starting); after `timeoutMs` it throws an
 * Error naming `what` and the last check's error, if any.
 */
export async function waitFor<T>(cond: () => T | Promise<T>, options: WaitOptions): Promise<NonNullable<T>> {
  const { timeoutMs = 30_000, intervalMs = 50, what } = options;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v as NonNullable<T>;
      last = undefined;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) {
      const why = last === undefined ? '' : ` (last check threw: ${last instanceof Error ? last.message : String(last)})`;
      throw new Error(`waited ${timeoutMs} ms for ${typeof what === 'function' ? what() : what}${why}`);
    }
    await sleep(intervalMs);
  }
}
