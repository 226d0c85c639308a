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
  /** What the key is bound to: install id/schema.table/tag of its database row ('' for a key of idlease 0.2 or no key). */
  readonly owner: string;
  /** The identity of the server that answered: run_id/master_replid. */
  readonly identity: string;
  /** The identity that installed the key's window ('' without a key). */
  readonly installedBy: string;
  readonly current: { readonly base: bigint; readonly size: number; readonly issued: number } | undefined;
  readonly queued: { readonly base: bigint; readonly size: number } | undefined;
  readonly high: bigint;
  /** The highest ID the key issued as far as it records (0 when unknown). */
  readonly top: bigint;
  /** The key was installed by this server's present incarnation: the next call issues from it. */
  readonly live: boolean;
}

/** The key answered `foreign`: it belongs to another database row. Raised as a typed error by the sequence. */
export class ForeignKey extends Error {
  constructor(readonly owner: string) {
    super(`key of another owner: ${owner}`);
  }
}

export class RedisKey {
  /**
   * @param owner what the key is bound to (install id/schema.table/tag); '' for read-only use (status).
   * @param token this process's election token: a reply that elected it and was lost is won back.
   */
  constructor(
    private readonly redis: RedisCommander,
    readonly key: string,
    private readonly timeoutMs: number,
    private readonly clock: Clock = SYSTEM_CLOCK,
    private readonly owner = '',
    private readonly token = '',
  ) {}

  private run(args: readonly string[], timeoutMs = this.timeoutMs): Promise<string[]> {
    return within(runScript(this.redis, this.key, args), timeoutMs, `Redis (${this.redis.kind}) call on ${this.key}`, this.clock);
  }

  private async runOwned(args: readonly string[], timeoutMs?: number): Promise<string[]> {
    const reply = await this.run([args[0]!, this.owner, ...args.slice(1)], timeoutMs);
    if (reply[0] === 'foreign' && reply.length === 2) throw new ForeignKey(reply[1]!);
    return reply;
  }

  /**
   * Up to `n` IDs; elects the caller to lease the next window when the key has `threshold` or fewer
   * left and no window queued. `timeoutMs` (at most the command timeout) keeps a call inside its caller's wait.
   */
  async next(n: number, threshold: number, claimMs: number, timeoutMs?: number): Promise<NextReply> {
    return parseNextReply(await this.runOwned(['next', String(n), String(threshold), String(claimMs), this.token], timeoutMs));
  }

  /** Compare-and-set: `w` becomes the current or the queued window only on the incarnation `expected` and above everything the key saw. */
  async install(expected: string, w: Window): Promise<InstallReply> {
    return parseInstallReply(await this.runOwned(['install', expected, String(w.base), String(w.size), String(w.end)]));
  }

  /** Take back the queued window starting at `base` if nobody started issuing from it; true if removed. */
  async unqueue(expected: string, base: bigint): Promise<boolean> {
    const [kind] = await this.runOwned(['unqueue', expected, String(base)]);
    return kind === 'removed';
  }

  /** Open the election again: the caller elected on `expected` cannot lease (a fatal error). */
  async release(expected: string): Promise<void> {
    await this.runOwned(['release', expected]);
  }

  async status(): Promise<KeyStatus> {
    const [identity, inc, base, size, off, nbase, nsize, hi, , own, tb, to] = await this.run(['status']);
    const top = base && Number(off) > 0 ? BigInt(base) + BigInt(off!) : tb ? BigInt(tb) + BigInt(to || '0') : 0n;
    return Object.freeze({
      owner: own ?? '',
      top,
      identity: identity!,
      installedBy: inc!,
      current: base ? { base: BigInt(base), size: Number(size), issued: Number(off) } : undefined,
      queued: nbase ? { base: BigInt(nbase), size: Number(nsize) } : undefined,
      high: BigInt(hi || '0'),
      live: inc === identity && base !== '',
    });
  }
}
