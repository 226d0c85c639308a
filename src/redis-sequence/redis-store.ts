/**
 * The tag's key in Redis, as typed operations on the sequence script (script.ts). Every call is
 * bounded: a call abandoned at its bound may still run later, which only burns the IDs it issued
 * (a gap) — nothing ever re-sends a call whose reply was lost, and an abandoned install is never
 * given back, because it may have landed.
 */
import { within } from '../runtime/deadline.js';
import { SYSTEM_CLOCK, type Clock } from '../runtime/clock.js';
import { runScript, type RedisCommander } from './client.js';
import { parseInstallReply, parseNextReply, type InstallReply, type NextReply, type Window } from './window.js';

export interface KeyStatus {
  /** The identity of the server that answered: run_id/master_replid. */
  readonly identity: string;
  /** The identity that installed the key's window ('' without a key). */
  readonly installedBy: string;
  readonly current: { readonly base: bigint; readonly size: number; readonly issued: number } | undefined;
  readonly queued: { readonly base: bigint; readonly size: number } | undefined;
  readonly high: bigint;
  /** The key was installed by this server's present incarnation: the next call issues from it. */
  readonly live: boolean;
}

export class RedisKey {
  constructor(
    private readonly redis: RedisCommander,
    readonly key: string,
    private readonly timeoutMs: number,
    private readonly clock: Clock = SYSTEM_CLOCK,
  ) {}

  private run(args: readonly string[]): Promise<string[]> {
    return within(runScript(this.redis, this.key, args), this.timeoutMs, `Redis (${this.redis.kind}) call on ${this.key}`, this.clock);
  }

  /** Up to `n` IDs; elects the caller to lease the next window when the key has `threshold` or fewer left and no window queued. */
  async next(n: number, threshold: number, claimMs: number): Promise<NextReply> {
    return parseNextReply(await this.run(['next', String(n), String(threshold), String(claimMs)]));
  }

  /** Compare-and-set: `w` becomes the current or the queued window only on the incarnation `expected` and above everything the key saw. */
  async install(expected: string, w: Window): Promise<InstallReply> {
    return parseInstallReply(await this.run(['install', expected, String(w.base), String(w.size), String(w.end)]));
  }

  /** Take back the queued window starting at `base` if nobody started issuing from it; true if removed. */
  async unqueue(expected: string, base: bigint): Promise<boolean> {
    const [kind] = await this.run(['unqueue', expected, String(base)]);
    return kind === 'removed';
  }

  /** Open the election again: the caller elected on `expected` cannot lease (a fatal error). */
  async release(expected: string): Promise<void> {
    await this.run(['release', expected]);
  }

  async status(): Promise<KeyStatus> {
    const [identity, inc, base, size, off, nbase, nsize, hi] = await this.run(['status']);
    return Object.freeze({
      identity: identity!,
      installedBy: inc!,
      current: base ? { base: BigInt(base), size: Number(size), issued: Number(off) } : undefined,
      queued: nbase ? { base: BigInt(nbase), size: Number(nsize) } : undefined,
      high: BigInt(hi || '0'),
      live: inc === identity && base !== '',
    });
  }
}
