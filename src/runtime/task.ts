import { backoffMs } from './backoff.js';
import { SYSTEM_CLOCK, wakeableSleep, type Clock, type WakeableSleep } from './clock.js';
import { settlesWithin } from './deadline.js';

/** What a step may ask for instead of a pause: nothing was done, try again after a backoff (as after a failure, but no error). */
export const BACK_OFF = Symbol('back off');

export interface BackgroundTaskOptions {
  /** One round of work. Resolves to the ms to sleep before the next round (0: at once), or BACK_OFF. */
  step(): Promise<number | typeof BACK_OFF>;
  /**
   * Whether to run a (further) round; default: always, until stop(). Checked synchronously
   * before every round, and the task ends in the same synchronous turn as the check that
   * said no: a caller who sees `running` true can count on this check still to come.
   */
  wanted?(): boolean;
  /**
   * A round failed (not during stop()). `attempt` counts the failures in a row (1 for the
   * first), `retryInMs` is the backoff before the next round. Return false to end the task.
   */
  failed?(err: unknown, attempt: number, retryInMs: number): boolean | void;
  /** The task ended (wanted() said no, failed() said stop, or stop()): called synchronously as `running` turns false. */
  ended?(): void;
  /** Backoff after a failure or BACK_OFF: doubling from minMs to maxMs, with jitter (backoff.ts). */
  backoff: { readonly minMs: number; readonly maxMs: number };
  clock?: Clock;
}

/**
 * One background loop: step → (on failure) backoff → sleep → step …, started on demand,
 * woken early by wake(), ended by stop() within a bound. At most one step runs at a time;
 * none starts after stop().
 */
export class BackgroundTask {
  private readonly options: BackgroundTaskOptions;
  private readonly clock: Clock;
  private active = false;
  private stopping = false;
  private done: Promise<void> = Promise.resolve();
  private sleeping: WakeableSleep | undefined;
  /** The current sleep is a backoff after a failure (or BACK_OFF): wake() leaves it alone. */
  private backingOff = false;

  constructor(options: BackgroundTaskOptions) {
    this.options = options;
    this.clock = options.clock ?? SYSTEM_CLOCK;
  }

  /** A round is running, sleeping, or about to run. */
  get running(): boolean {
    return this.active;
  }

  get stopped(): boolean {
    return this.stopping;
  }

  /**
   * Start the loop if it is not running (and not stopped): the first round after `afterMs`
   * (a sleep that wake() cuts short), or at once, in which case the first wanted() check runs
   * now, synchronously.
   */
  start(afterMs = 0): void {
    if (this.active || this.stopping) return;
    this.active = true;
    this.done = this.loop(afterMs);
  }

  /**
   * Run the next round now if the task is sleeping its planned pause. A backoff after a failure
   * is not cut short: callers wake the task when they need it (every next() of a fenced snowflake
   * holder does), and waking a failing round each time would retry at their rate, not the
   * backoff's. A wake() during a round is not kept: that round's result decides the next pause.
   */
  wake(): void {
    if (!this.backingOff) this.sleeping?.wake();
  }

  /**
   * No round starts after this call. Resolves once the running round has ended, or after
   * `timeoutMs` (on the task's clock) if it does not: true if the task ended in time. A round
   * still running then is abandoned, not cancelled; `running` stays true until it returns.
   */
  async stop(timeoutMs: number): Promise<boolean> {
    this.stopping = true;
    this.sleeping?.wake();
    if (!this.active) return true;
    return settlesWithin(this.done, timeoutMs, this.clock);
  }

  private async loop(afterMs: number): Promise<void> {
    const { step, wanted, failed, backoff } = this.options;
    let attempt = 0;
    try {
      if (afterMs > 0) await this.sleep(afterMs);
      while (!this.stopping && (wanted?.() ?? true)) {
        let pause: number;
        let backingOff = true;
        try {
          const r = await step();
          if (r === BACK_OFF) {
            pause = backoffMs(attempt++, backoff.minMs, backoff.maxMs);
          } else {
            attempt = 0;
            pause = r;
            backingOff = false;
          }
        } catch (err) {
          if (this.stopping) return;
          pause = backoffMs(attempt++, backoff.minMs, backoff.maxMs);
          if (failed?.(err, attempt, pause) === false) return;
        }
        if (pause > 0 && !this.stopping) {
          this.backingOff = backingOff;
          try {
            await this.sleep(pause);
          } finally {
            this.backingOff = false;
          }
        }
      }
    } finally {
      this.active = false;
      this.options.ended?.();
    }
  }

  private async sleep(ms: number): Promise<void> {
    const s = (this.sleeping = wakeableSleep(this.clock, ms));
    try {
      await s.done;
    } finally {
      this.sleeping = undefined;
    }
  }
}
