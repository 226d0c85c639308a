/**
 * A statement deadline that tolerates a starved event loop. A caller spinning on
 * `await next()` runs only microtasks, so the answer to a background lease can sit in the
 * socket for seconds; when the loop finally turns, timers run before I/O and a plain
 * timeout (knex's .timeout()) would fail a statement that already succeeded. Here the
 * timer only arms a check that runs after the I/O phase (setImmediate).
 *
 * The statement itself is not cancelled: it may still run later, which only abandons the range
 * it leases (forward reservation: nobody else can be handed it).
 */
export function withDeadline<T>(query: PromiseLike<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(new Error(`statement did not answer within ${ms} ms (statementTimeoutMs)`));
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
