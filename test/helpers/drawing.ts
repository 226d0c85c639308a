/**
 * Callers drawing IDs until stopped, for tests that run something (an admin command, a reshard)
 * while allocators draw through it: every ID and every error kept, phases measured in IDs, not
 * seconds (`more`).
 */
export interface Drawing {
  readonly ids: bigint[];
  readonly errors: unknown[];
  /** Wait for `n` more IDs than now (or, with `orErrors`, `n` more errors); throws past `timeoutMs` without them. */
  more(n: number, options?: { orErrors?: boolean; timeoutMs?: number }): Promise<void>;
  stop(): Promise<void>;
}

export function drawing(draws: ReadonlyArray<() => Promise<bigint | bigint[]>>): Drawing {
  const ids: bigint[] = [];
  const errors: unknown[] = [];
  let stopped = false;
  const done = Promise.all(
    draws.map(async (draw) => {
      while (!stopped) {
        try {
          const got = await draw();
          if (typeof got === 'bigint') ids.push(got);
          else ids.push(...got);
          // IDs from memory resolve in microtasks: yield, or the leases' I/O, the timers and a CLI's pipes starve.
          await new Promise((r) => setImmediate(r));
        } catch (err) {
          errors.push(err);
          // A refusal that lasts (a mixed ticket set) must not spin.
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    }),
  );
  return {
    ids,
    errors,
    async more(n, { orErrors = false, timeoutMs = 60_000 } = {}) {
      const [ids0, errors0] = [ids.length, errors.length];
      const deadline = Date.now() + timeoutMs;
      while (ids.length < ids0 + n && !(orErrors && errors.length >= errors0 + n)) {
        if (Date.now() > deadline)
          throw new Error(`no progress: ${ids.length - ids0} IDs, ${errors.length - errors0} errors (last: ${String(errors.at(-1))})`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    async stop() {
      stopped = true;
      await done;
    },
  };
}

/** How many IDs appear more than once. */
export function repeats(ids: readonly bigint[]): number {
  return ids.length - new Set(ids.map(String)).size;
}
