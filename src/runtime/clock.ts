/**
 * Wall time (what goes into an ID), monotonic time (what a lease or a bound is counted on, immune
 * to clock steps) and a way to wait. Allocators take one so tests can drive time by hand.
 */
export interface Clock {
  wallMs(): number;
  monoMs(): number;
  sleep(ms: number): Promise<void>;
}

export const SYSTEM_CLOCK: Clock = Object.freeze({
  wallMs: () => Date.now(),
  monoMs: () => performance.now(),
  sleep: (ms: number) => new Promise<void>((r) => setTimeout(r, ms)),
});

export interface WakeableSleep {
  readonly done: Promise<void>;
  /** End the sleep now. Idempotent. */
  wake(): void;
}

/**
 * A sleep that `wake()` cuts short. On the system clock its timer is cleared then, so nothing
 * stopped keeps a timer (or the process) alive; an injected clock's sleep cannot be cancelled,
 * and its end is then simply ignored. `unref`: the timer alone does not keep the process alive.
 */
export function wakeableSleep(clock: Clock, ms: number, unref = false): WakeableSleep {
  let wake!: () => void;
  const done = new Promise<void>((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    wake = () => {
      if (timer !== undefined) clearTimeout(timer);
      resolve();
    };
    if (clock === SYSTEM_CLOCK) {
      timer = setTimeout(resolve, ms);
      if (unref) timer.unref();
    } else {
      void clock.sleep(ms).then(resolve);
    }
  });
  return { done, wake };
}
