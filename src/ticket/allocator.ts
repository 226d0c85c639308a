/**
 * The ticket allocator: round-robin over healthy servers, failover within the call, and a
 * typed error when no server produces an ID in time. No SQL and no driver here: each server is
 * a TicketServer (server.ts) over a TicketSource, its health a ServerHealth (health.ts).
 */
import { IdleaseError, isIdleaseError } from '../errors.js';
import { settlesWithin } from '../runtime/deadline.js';
import { Emitter } from '../runtime/events.js';
import { Recovery } from './health.js';
import { resolveTicketOptions } from './options.js';
import { SchemeSet } from './scheme-set.js';
import { TicketServer } from './server.js';
import type { TicketAllocator, TicketAllocatorOptions, TicketEvent, TicketServerStatus, TicketStats } from './types.js';

export type {
  TicketAllocator,
  TicketAllocatorOptions,
  TicketEvent,
  TicketServerHealth,
  TicketServerOptions,
  TicketServerStatus,
  TicketStats,
} from './types.js';

export function createTicketAllocator(options: TicketAllocatorOptions): TicketAllocator {
  const o = resolveTicketOptions(options);
  const { clock, timeoutMs } = o;
  const events = new Emitter<TicketEvent>(o.onEvent);
  const recovery = new Recovery(clock);
  const kit = {
    clock,
    backoff: { minMs: o.backoffInitialMs, maxMs: o.backoffMaxMs },
    emit: (e: TicketEvent) => events.emit(e),
    recovered: () => recovery.notify(),
  };
  // The servers are checked as one set whenever one of them is seen on a new pair.
  const set = new SchemeSet(o.increment, () => servers);
  const servers: TicketServer[] = o.servers.map((s) => new TicketServer(s, o, kit, set));
  let closed = false;
  let rr = 0;
  let served = 0;
  let timeouts = 0;

  async function next(): Promise<bigint> {
    if (closed) throw new IdleaseError('CLOSED', 'The ticket allocator was closed; create a new one.');
    const deadline = clock.monoMs() + timeoutMs;
    const causes: unknown[] = [];
    do {
      if (closed) throw new IdleaseError('CLOSED', 'The ticket allocator was closed while next() was waiting for a server.');
      const start = rr++ % servers.length;
      let tried = 0;
      for (let i = 0; i < servers.length && (i === 0 || clock.monoMs() < deadline); i++) {
        const s = servers[(start + i) % servers.length]!;
        if (!s.health.up) continue;
        tried++;
        const r = await s.draw(deadline);
        if ('id' in r) {
          served++;
          return r.id;
        }
        causes.push(r.failed);
        if (closed) throw new IdleaseError('CLOSED', 'The ticket allocator was closed while next() was running.');
      }
      // Refusals are about configuration or data, not health: waiting will not fix them.
      if (servers.every((s) => s.health.state === 'refused')) break;
      if (tried === 0 || servers.every((s) => !s.health.up)) await recovery.wait(deadline - clock.monoMs());
    } while (clock.monoMs() < deadline);
    throw unavailable(causes);
  }

  /** Why no server produced an ID: a setup error when every server has one, else DB_UNAVAILABLE naming each server. */
  function unavailable(causes: readonly unknown[]): IdleaseError {
    const configErrors = servers.map((s) => s.configError).filter((e): e is IdleaseError => e !== undefined);
    if (configErrors.length === servers.length) return configErrors[0]!;
    const refusal = [...causes].reverse().find((e): e is IdleaseError => isIdleaseError(e, 'INVARIANT') || isIdleaseError(e, 'EXHAUSTED'));
    if (refusal && servers.every((s) => s.health.state === 'refused')) return refusal;
    const why = servers.map((s) => `${s.name}: ${s.health.state}${s.health.lastError ? ` — ${s.health.lastError}` : ''}`).join('; ');
    const err = new IdleaseError(
      'DB_UNAVAILABLE',
      `No ticket server produced an ID within ${timeoutMs} ms (${why}). Check the servers (idlease tickets status) or raise timeoutMs.`,
      {
        cause: causes.at(-1),
        cli: {
          message: `No ticket server produced an ID within ${timeoutMs / 1000} s (${why}). Check the servers (idlease tickets status with the same --server flags), then rerun (--wait <seconds> waits longer).`,
        },
      },
    );
    timeouts++;
    events.emit({ type: 'timeout', error: err });
    return err;
  }

  const counters = (s: TicketServer) => ({
    name: s.name,
    offset: s.offset,
    increment: s.increment,
    health: s.health.state,
    lastIssued: s.lastIssued,
    failures: s.health.failures,
    lockConflicts: s.lockConflicts,
    failoverJumps: s.failoverJumps,
    lastError: s.health.lastError,
  });

  return Object.freeze({
    next,
    async ready() {
      await Promise.all(servers.map((s) => s.init().catch((err: unknown) => s.markDown(err))));
      const bad = servers.find((s) => s.configError);
      if (bad) throw bad.configError!;
    },
    async status(): Promise<TicketServerStatus[]> {
      return Promise.all(servers.map(async (s) => Object.freeze({ ...counters(s), server: await s.facts() })));
    },
    stats(): TicketStats {
      const perServer = servers.map((s) => Object.freeze({ ...counters(s), served: s.served, lastErrorAt: s.health.lastErrorAt }));
      return Object.freeze({ kind: 'ticket', served, timeouts, closed, servers: Object.freeze(perServer) });
    },
    onEvent(listener: (event: TicketEvent) => void): () => void {
      return events.add(listener);
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const s of servers) s.health.stop();
      recovery.notify();
      const shut = Promise.all(servers.map((s) => s.source.close()));
      if (await settlesWithin(shut, o.closeTimeoutMs, clock)) await shut;
    },
  });
}
