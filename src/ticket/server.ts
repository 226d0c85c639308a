/**
 * One ticket server as the allocator sees it: its source, its health, the scheme its draws run
 * under, and its counters. `draw` is one server's part of a call: lock conflicts retried here,
 * a reshard's fence followed, every ID checked before it leaves.
 */
import { isLockConflict } from '../dialects/driver-errors.js';
import { needsFailoverFence, type TicketScheme } from '../dialects/tickets.js';
import { IdleaseError, isIdleaseError } from '../errors.js';
import type { Clock } from '../runtime/clock.js';
import { within } from '../runtime/deadline.js';
import { isExhausted, refuseReason } from './config.js';
import { ServerHealth, type HealthKit } from './health.js';
import type { ResolvedTicketServer } from './options.js';
import type { SchemeMember, SchemeSet } from './scheme-set.js';
import type { ServerFacts, TicketSource } from './source.js';

export interface ServerRules {
  /** The increment the options name; the server's scheme row must agree at first contact. */
  readonly increment: number;
  readonly statementTimeoutMs: number;
  readonly lockRetries: number;
  readonly clock: Clock;
}

export type Attempt = { readonly id: bigint } | { readonly failed: unknown };

/**
 * The error of one server, named. A hint's command must reach that server (cli.url) and, in a
 * set of several, install its own offset of the increment.
 */
function withServerName(err: IdleaseError, name: string, pair: { offset: number; increment: number }): IdleaseError {
  const placed = pair.increment > 1 ? ` --tickets-increment ${pair.increment} --tickets-offset ${pair.offset}` : '';
  const cli = err.cli
    ? { message: `${name}: ${err.cli.message.replace(/(--tickets [^\s`]+)/, `$1${placed}`)}`, url: err.cli.url ?? name }
    : undefined;
  return new IdleaseError(err.code, `${name}: ${err.message}`, { cause: err.cause ?? err, ...(cli ? { cli } : {}) });
}

export class TicketServer implements SchemeMember {
  readonly name: string;
  readonly source: TicketSource;
  readonly health: ServerHealth;
  /** The pair last read from the server (the configured one before that). */
  increment: number;
  offset: number;
  /** BAD_CONFIG or NOT_MIGRATED found at init: reported by ready() and when no server is left. */
  configError: IdleaseError | undefined;
  served = 0;
  lockConflicts = 0;
  /** Failovers this allocator fenced on this server (its counter jumped by the failover gap). */
  failoverJumps = 0;
  lastIssued: bigint | undefined;
  private readonly configuredOffset: number;
  /** The open scheme draws run under; undefined until read (again, after a failure or a fence). */
  private scheme: TicketScheme | undefined;
  /** The server's scheme matched the options once; from then on reshards are followed. */
  private verified = false;

  constructor(
    server: ResolvedTicketServer,
    private readonly rules: ServerRules,
    kit: HealthKit,
    /** The allocator's whole set: a server seen on a new pair is followed only with all the others. */
    private readonly set: SchemeSet,
  ) {
    this.name = server.name;
    this.source = server.source;
    this.configuredOffset = server.offset;
    this.increment = rules.increment;
    this.offset = server.offset;
    this.health = new ServerHealth(server.name, kit, async () => {
      await this.bounded(this.source.probe(), rules.statementTimeoutMs);
      await this.init();
    });
  }

  private bounded<T>(p: Promise<T>, ms: number): Promise<T> {
    return within(p, ms, this.name, this.rules.clock);
  }

  /**
   * Read the server's scheme. At first contact it must match the options (verified and
   * refused); after a reshard changed it, the allocator follows the server only once the whole
   * set agrees (scheme-set.ts): one server's new pair says nothing about the others.
   */
  async init(): Promise<TicketScheme> {
    const { increment, statementTimeoutMs } = this.rules;
    if (!this.verified && this.source.checkServer) {
      try {
        await this.bounded(this.source.checkServer(this.name), statementTimeoutMs);
      } catch (err) {
        if (isIdleaseError(err, 'BAD_CONFIG')) this.configError = err;
        throw err;
      }
    }
    let scheme: TicketScheme;
    try {
      scheme = await this.bounded(this.source.readScheme(), statementTimeoutMs);
    } catch (err) {
      // A server without the ticket objects will not grow them by waiting: report it now.
      if (isIdleaseError(err, 'NOT_MIGRATED'))
        this.configError = withServerName(err, this.name, { offset: this.configuredOffset, increment });
      throw err;
    }
    if (needsFailoverFence(scheme) && this.source.fenceFailover) {
      // A new instance (a promoted replica, a restore): its counter may be behind tickets the old
      // primary issued. Draws there are refused by the statement itself until the counter jumps.
      if (await this.bounded(this.source.fenceFailover(), statementTimeoutMs)) this.failoverJumps++;
      scheme = await this.bounded(this.source.readScheme(), statementTimeoutMs);
    }
    if (!scheme.open) throw new Error(`${this.name}: a reshard is in progress (scheme closed); retrying`);
    if (!this.verified && (scheme.increment !== increment || scheme.offset !== this.configuredOffset)) {
      this.configError = new IdleaseError(
        'BAD_CONFIG',
        `${this.name} serves offset ${scheme.offset} of increment ${scheme.increment} (its ticket scheme row), but the allocator was given offset ${this.configuredOffset} of increment ${increment}. ` +
          `Fix the options, or move the whole set — every server that serves increment ${scheme.increment}, not only this one — to a new scheme with reshardTickets (CLI: idlease tickets reshard).`,
      );
      throw this.configError;
    }
    if (this.verified && this.set.needsCheck(scheme)) {
      await this.set.check();
      // The set moved elsewhere while this server's scheme was read (it is being resharded): read it again.
      if (scheme.increment !== this.set.increment) throw new Error(`${this.name}: its scheme changed while the set was checked; retrying`);
    }
    this.configError = undefined;
    this.verified = true;
    this.increment = scheme.increment;
    this.offset = scheme.offset;
    this.scheme = scheme;
    return scheme;
  }

  /** The scheme as the server says now, for the set check; a server that does not answer leaves the rotation. */
  async readSchemeNow(): Promise<TicketScheme | undefined> {
    try {
      return await this.bounded(this.source.readScheme(), this.rules.statementTimeoutMs);
    } catch (err) {
      this.markDown(err);
      return undefined;
    }
  }

  /** Refused with the set's error: no draw here until a probe finds the set one scheme again. */
  refuse(err: IdleaseError): void {
    this.configError = err;
    this.markDown(err, 'refused');
  }

  /** Out of the rotation until a probe brings it back. */
  markDown(err: unknown, state?: 'down' | 'refused'): void {
    this.scheme = undefined;
    if (isIdleaseError(err, 'NOT_MIGRATED'))
      this.configError = withServerName(err, this.name, { offset: this.configuredOffset, increment: this.rules.increment });
    this.health.markDown(err, state);
  }

  /** One ID from this server before `deadline` (monotonic ms), or why not (the server then left the rotation, unless only contended). */
  async draw(deadline: number): Promise<Attempt> {
    const { clock, statementTimeoutMs } = this.rules;
    let conflicts = 0;
    for (let refenced = 0; ;) {
      try {
        // The scheme this draw runs under, pair and generation together: a concurrent call may
        // move the server to a newer one while this one is in flight.
        const scheme = this.scheme ?? (await this.init());
        const id = await this.bounded(this.source.draw(scheme), Math.max(1, Math.min(statementTimeoutMs, deadline - clock.monoMs())));
        if (id !== undefined) return this.accept(scheme, id);
        // Fenced by a reshard, or on a new instance (a failover): follow the new scheme, or fence
        // the failover, when the scheme is read again.
        this.scheme = undefined;
        if (++refenced > 3) throw new Error(`${this.name}: resharded or failed over while drawing; retrying`);
      } catch (err) {
        if (!isLockConflict(err)) {
          this.markDown(err);
          return { failed: err };
        }
        this.lockConflicts++;
        // Alive but contended: past the retries, another server may do.
        if (++conflicts > this.rules.lockRetries || clock.monoMs() >= deadline) return { failed: err };
        await clock.sleep(Math.random() * Math.min(50, 2 ** conflicts));
      }
    }
  }

  /** An ID the server drew under `scheme`: handed out, or refused with the server taken out of the rotation. */
  private accept(scheme: TicketScheme, id: bigint): Attempt {
    const why = refuseReason(id, scheme.increment, scheme.offset);
    if (why) {
      const err = new IdleaseError(
        isExhausted(id) ? 'EXHAUSTED' : 'INVARIANT',
        `${this.name}: ${why}. The ID was not handed out; the server left the rotation.`,
      );
      this.markDown(err, 'refused');
      return { failed: err };
    }
    // Concurrent draws finish out of order: keep the highest, for status().
    if (this.lastIssued === undefined || id > this.lastIssued) this.lastIssued = id;
    this.served++;
    return { id };
  }

  /** What the server says about itself now, or undefined when it does not answer in time. */
  async facts(): Promise<ServerFacts | undefined> {
    try {
      return await this.bounded(this.source.facts(), this.rules.statementTimeoutMs);
    } catch {
      return undefined;
    }
  }
}
