/**
 * Whether a ticket server is in the rotation. A server that fails is `down` and probed in the
 * background with backoff until it answers; one whose setup or data is wrong is `refused`:
 * probed the same way (a migration or a reshard may fix it), but never waited for.
 */
import { connectionProblem } from '../dialects/connection-errors.js';
import { errorCategory } from '../errors.js';
import { backoffMs } from '../runtime/backoff.js';
import { wakeableSleep, type Clock } from '../runtime/clock.js';
import { BackgroundTask } from '../runtime/task.js';
import type { TicketEvent, TicketServerHealth } from './types.js';

/** Configuration and invariant errors (ERROR_CATEGORIES) do not pass by waiting: the server is refused, not retried as down. */
export function healthAfter(err: unknown): 'down' | 'refused' {
  const category = errorCategory(err);
  return category === 'config' || category === 'invariant' ? 'refused' : 'down';
}

export interface HealthKit {
  readonly clock: Clock;
  readonly backoff: { readonly minMs: number; readonly maxMs: number };
  readonly emit: (event: TicketEvent) => void;
  /** Called when a probe brings a server back. */
  readonly recovered: () => void;
}

export class ServerHealth {
  private current: TicketServerHealth = 'up';
  private failureCount = 0;
  private lastFailure: { message: string; at: number } | undefined;
  private readonly prober: BackgroundTask;

  /** `probe` resolves when the server may rejoin the rotation, and throws why not. */
  constructor(
    readonly name: string,
    private readonly kit: HealthKit,
    probe: () => Promise<void>,
  ) {
    this.prober = new BackgroundTask({
      wanted: () => this.current !== 'up',
      step: async () => {
        try {
          await probe();
        } catch (err) {
          this.markDown(err);
          return this.retryInMs();
        }
        this.current = 'up';
        this.failureCount = 0;
        kit.emit({ type: 'server-up', server: name });
        kit.recovered();
        return 0;
      },
      backoff: kit.backoff,
      clock: kit.clock,
    });
  }

  get state(): TicketServerHealth {
    return this.current;
  }

  get up(): boolean {
    return this.current === 'up';
  }

  get failures(): number {
    return this.failureCount;
  }

  get lastError(): string | undefined {
    return this.lastFailure?.message;
  }

  /** Epoch ms of the last failure. */
  get lastErrorAt(): number | undefined {
    return this.lastFailure?.at;
  }

  /** Take the server out of the rotation; its probe is scheduled (or already running). */
  markDown(err: unknown, state: 'down' | 'refused' = healthAfter(err)): void {
    const was = this.current;
    this.current = state;
    this.failureCount++;
    this.lastFailure = { message: err instanceof Error ? err.message : String(err), at: this.kit.clock.wallMs() };
    if (was === 'up') this.kit.emit({ type: 'server-down', server: this.name, health: state, error: err, problem: connectionProblem(err) });
    this.prober.start(this.retryInMs());
  }

  /** No probe starts after this; one in flight is not waited for (it ends against closed connections). */
  stop(): void {
    void this.prober.stop(0);
  }

  private retryInMs(): number {
    return backoffMs(this.failureCount - 1, this.kit.backoff.minMs, this.kit.backoff.maxMs);
  }
}

/**
 * Callers waiting for any server to come back. Every server that is not up has a probe scheduled
 * or running (markDown sees to it), and a probe that succeeds notifies: so a waiter is woken by a
 * recovery or by its own deadline, never left behind.
 */
export class Recovery {
  private readonly waiters = new Set<() => void>();

  constructor(private readonly clock: Clock) {}

  async wait(ms: number): Promise<void> {
    const sleep = wakeableSleep(this.clock, Math.max(0, ms));
    this.waiters.add(sleep.wake);
    await sleep.done;
    // A waiter that timed out must not pile up during a long outage.
    this.waiters.delete(sleep.wake);
  }

  notify(): void {
    const woken = [...this.waiters];
    this.waiters.clear();
    for (const wake of woken) wake();
  }
}
