/**
 * The ticket allocator: round-robin over healthy servers, failover within the call,
 * backoff and background probes for servers that fail, and a check on every ID before
 * it leaves. No SQL here: each server is a TicketSource from src/dialects/tickets.ts.
 */
import type { Knex } from 'knex';
import { flavorOf, isPostgres } from '../dialects/detect.js';
import {
  isLockConflict,
  mysqlTicketSource,
  postgresTicketSource,
  type ServerFacts,
  type TicketScheme,
  type TicketSource,
} from '../dialects/tickets.js';
import { connectionProblem, type ConnectionProblem } from '../dialects/connection-errors.js';
import { IdleaseError, isIdleaseError } from '../errors.js';
import { backoffMs } from '../runtime/backoff.js';
import { SYSTEM_CLOCK, wakeableSleep } from '../runtime/clock.js';
import { settlesWithin, within } from '../runtime/deadline.js';
import { Emitter } from '../runtime/events.js';
import { BackgroundTask } from '../runtime/task.js';
import { isExhausted, refuseReason, resolveServerSet } from './config.js';
import { intOption, rejectUnknownKeys } from '../validate.js';
import { privateKnexFor } from '../drivers/private-knex.js';

export interface TicketServerOptions {
  /** The server, as a Knex instance. Either this or `pool`. */
  readonly knex?: Knex;
  /**
   * The server, as a pool the app already has (mysql2, pg, postgres.js): idlease opens its own
   * connections with the same settings (up to connectionsPerServer) and never uses the pool's —
   * the ticket pair is session state that must not reach the app's own inserts. Closed by close().
   */
  readonly pool?: unknown;
  /** This server's residue: it issues IDs ≡ offset (mod increment). 1..increment. */
  readonly offset: number;
  /** Label for status() and errors. Default `server<offset>`. */
  readonly name?: string;
}

export interface TicketAllocatorOptions {
  readonly servers: readonly TicketServerOptions[];
  /** Default: the number of servers. Larger leaves room to add servers without a reshard of offsets. */
  readonly increment?: number;
  /** Which tickets table / sequence. Default 'default'. */
  readonly sequence?: string;
  /** PostgreSQL schema of the sequence and scheme table. Default `idlease`, where migrate installs them. */
  readonly schema?: string;
  /**
   * Bound on one statement on one server before it counts as failed. Default 2000 ms.
   * MySQL sessions get innodb_lock_wait_timeout = max(1 s, half of it), so lock waits end
   * as retryable errors first.
   */
  readonly statementTimeoutMs?: number;
  /** Bound on a whole next(): past it, DB_UNAVAILABLE. Default 5000 ms. */
  readonly timeoutMs?: number;
  /** Deadlock / lock-wait retries on one server before the call moves on. Default 10. */
  readonly lockRetries?: number;
  /** Backoff for a failed server before it is probed again. Default 100 ms doubling to 5000 ms. */
  readonly backoffInitialMs?: number;
  readonly backoffMaxMs?: number;
  /** MySQL: connections idlease opens per server (its own, not from the app's pool). Default 8. */
  readonly connectionsPerServer?: number;
  /** How long close() waits for the servers' connections to close. Default 5000 ms. */
  readonly closeTimeoutMs?: number;
  /** Called when a server goes down, comes back or is refused, and when a call times out (metrics, logs). Must not throw. */
  readonly onEvent?: (event: TicketEvent) => void;
}

export type TicketEvent =
  | { readonly type: 'server-down'; readonly server: string; readonly health: 'down' | 'refused'; readonly error: unknown; readonly problem: ConnectionProblem | undefined }
  | { readonly type: 'server-up'; readonly server: string }
  | { readonly type: 'timeout'; readonly error: unknown };

/** A cheap frozen snapshot for metrics: no database round trip (status() asks the servers). */
export interface TicketStats {
  /** IDs handed out by this allocator. */
  readonly served: number;
  /** Calls that failed with DB_UNAVAILABLE after timeoutMs. */
  readonly timeouts: number;
  readonly closed: boolean;
  readonly servers: ReadonlyArray<{
    readonly name: string;
    readonly offset: number;
    readonly increment: number;
    readonly health: TicketServerHealth;
    readonly served: number;
    readonly failures: number;
    readonly lockConflicts: number;
    readonly lastIssued: bigint | undefined;
    readonly lastError: string | undefined;
    /** Epoch ms of the last failure on this server. */
    readonly lastErrorAt: number | undefined;
  }>;
}

export type TicketServerHealth = 'up' | 'down' | 'refused';

export interface TicketServerStatus {
  readonly name: string;
  readonly offset: number;
  readonly increment: number;
  readonly health: TicketServerHealth;
  /** Last ID this allocator handed out from the server. */
  readonly lastIssued: bigint | undefined;
  readonly failures: number;
  /** Deadlocks / lock-wait timeouts met and retried (never shown to callers). */
  readonly lockConflicts: number;
  readonly lastError: string | undefined;
  /** Read from the server now (undefined when it did not answer). */
  readonly server: ServerFacts | undefined;
}

export interface TicketAllocator {
  next(): Promise<bigint>;
  /** Check every server's scheme now; throws BAD_CONFIG if one disagrees with the options. */
  ready(): Promise<void>;
  status(): Promise<TicketServerStatus[]>;
  stats(): TicketStats;
  /** Listen to events from now on; returns the function that stops listening. */
  onEvent(listener: (event: TicketEvent) => void): () => void;
  close(): Promise<void>;
}

interface Server {
  readonly name: string;
  readonly source: TicketSource;
  readonly configuredOffset: number;
  increment: number;
  offset: number;
  generation: bigint | undefined;
  health: TicketServerHealth;
  failures: number;
  lockConflicts: number;
  lastError: string | undefined;
  lastIssued: bigint | undefined;
  served: number;
  lastErrorAt: number | undefined;
  /** Probes the server while it is not up, with backoff, until it answers or the allocator closes. */
  readonly prober: BackgroundTask;
  /** BAD_CONFIG found at init: reported by ready() and when no server is left. */
  configError: IdleaseError | undefined;
  /** The server's scheme matched the options once; from then on reshards are followed. */
  verified: boolean;
}

const KNOWN_OPTIONS = [
  'servers', 'increment', 'sequence', 'schema', 'statementTimeoutMs', 'timeoutMs', 'lockRetries', 'backoffInitialMs', 'backoffMaxMs',
  'connectionsPerServer', 'closeTimeoutMs', 'onEvent',
];

function positiveInt(value: unknown, name: string, fallback: number): number {
  return intOption(value, name, { min: 1, max: Number.MAX_SAFE_INTEGER, default: fallback });
}


/** Errors about the setup (options, missing migration): waiting will not fix them, so the server is refused, not retried as down. */
function isSetupError(err: unknown): boolean {
  return isIdleaseError(err, 'BAD_CONFIG') || isIdleaseError(err, 'NOT_MIGRATED');
}

/**
 * The error of one server, named. A hint's command must reach that server (cli.url) and, in a
 * set of several, install its own offset of the increment.
 */
function withServerName(err: IdleaseError, name: string, pair?: { offset: number; increment: number }): IdleaseError {
  const placed = pair !== undefined && pair.increment > 1 ? ` --tickets-increment ${pair.increment} --tickets-offset ${pair.offset}` : '';
  const cli = err.cli ? { message: `${name}: ${err.cli.message.replace(/(--tickets [^\s`]+)/, `$1${placed}`)}`, url: err.cli.url ?? name } : undefined;
  return new IdleaseError(err.code, `${name}: ${err.message}`, { cause: err.cause ?? err, ...(cli ? { cli } : {}) });
}

export function createTicketAllocator(options: TicketAllocatorOptions): TicketAllocator {
  if (options !== null && typeof options === 'object') rejectUnknownKeys(options, KNOWN_OPTIONS, 'createTicketAllocator');
  const { increment, sequence, schema } = resolveServerSet(options, 'createTicketAllocator({ servers: [{ knex, offset: 1 }, …] })');
  const statementTimeoutMs = positiveInt(options.statementTimeoutMs, 'statementTimeoutMs', 2000);
  const timeoutMs = positiveInt(options.timeoutMs, 'timeoutMs', 5000);
  const lockRetries = positiveInt(options.lockRetries, 'lockRetries', 10);
  const backoffInitialMs = positiveInt(options.backoffInitialMs, 'backoffInitialMs', 100);
  const backoffMaxMs = positiveInt(options.backoffMaxMs, 'backoffMaxMs', 5000);
  const connectionsPerServer = positiveInt(options.connectionsPerServer, 'connectionsPerServer', 8);
  const closeTimeoutMs = positiveInt(options.closeTimeoutMs, 'closeTimeoutMs', 5000);

  // Knex instances made here from a server's `pool`: ours to destroy on close (or on a bad option below).
  const owned: Knex[] = [];
  const knexOf = (s: TicketServerOptions, i: number): Knex => {
    if (s.pool !== undefined && s.knex !== undefined) {
      throw new IdleaseError('BAD_CONFIG', `servers[${i}] has both knex and pool: give one.`);
    }
    if (s.pool !== undefined) {
      const k = privateKnexFor(s.pool, `servers[${i}].pool`, connectionsPerServer);
      owned.push(k);
      return k;
    }
    if (!s.knex || typeof s.knex.raw !== 'function') {
      throw new IdleaseError('BAD_CONFIG', `servers[${i}].knex must be a Knex instance (idlease.connect(url) makes one), or give servers[${i}].pool (a mysql2, pg or postgres.js pool).`);
    }
    return s.knex;
  };
  let servers: Server[];
  try {
    servers = options.servers.map((s, i) => makeServer(s, i));
  } catch (err) {
    void Promise.all(owned.map((k) => k.destroy().catch(() => undefined)));
    throw err;
  }

  function makeServer(s: TicketServerOptions, i: number): Server {
    const knex = knexOf(s, i);
    const flavor = flavorOf(knex);
    if (schema !== undefined && !isPostgres(flavor)) {
      throw new IdleaseError('BAD_CONFIG', 'schema applies to PostgreSQL only; on MySQL the connection’s database is used.');
    }
    const ref = { schema, sequence };
    const source =
      flavor === 'mysql'
        ? mysqlTicketSource(knex, ref, { increment, offset: s.offset }, {
            maxConnections: connectionsPerServer,
            connectTimeoutMs: statementTimeoutMs,
            lockWaitTimeoutS: Math.max(1, Math.floor(statementTimeoutMs / 2000)),
          })
        : postgresTicketSource(knex, flavor, ref);
    const server: Server = {
      name: s.name ?? `server${s.offset}`,
      source,
      configuredOffset: s.offset,
      increment,
      offset: s.offset,
      generation: undefined,
      health: 'up',
      failures: 0,
      lockConflicts: 0,
      lastError: undefined,
      lastIssued: undefined,
      served: 0,
      lastErrorAt: undefined,
      prober: new BackgroundTask({
        wanted: () => !closed && server.health !== 'up',
        step: () => probe(server),
        backoff: { minMs: backoffInitialMs, maxMs: backoffMaxMs },
      }),
      configError: undefined,
      verified: false,
    };
    return server;
  }

  let closed = false;
  let rr = 0;
  let served = 0;
  let timeouts = 0;
  if (options.onEvent !== undefined && typeof options.onEvent !== 'function') throw new IdleaseError('BAD_CONFIG', 'onEvent must be a function (event) => void.');
  const events = new Emitter<TicketEvent>(options.onEvent);
  const emit = (event: TicketEvent) => events.emit(event);
  // Callers waiting for a server to come back. Every server that is not up has a probe
  // scheduled or running (markDown sees to it), and a probe that succeeds notifies: so a
  // waiter is woken by a recovery or by its own deadline, never left behind.
  const healthWaiters = new Set<() => void>();

  function notifyHealth(): void {
    const w = [...healthWaiters];
    healthWaiters.clear();
    for (const f of w) f();
  }

  function markDown(s: Server, err: unknown, health: 'down' | 'refused' = 'down'): void {
    const was = s.health;
    s.health = health;
    s.failures++;
    s.lastError = err instanceof Error ? err.message : String(err);
    s.lastErrorAt = Date.now();
    if (was === 'up') emit({ type: 'server-down', server: s.name, health, error: err, problem: connectionProblem(err) });
    s.generation = undefined;
    if (!closed) s.prober.start(backoffMs(s.failures - 1, backoffInitialMs, backoffMaxMs));
  }

  /** One probe; resolves to the pause before the next one (the prober stops once the server is up). */
  async function probe(s: Server): Promise<number> {
    try {
      await within(s.source.probe(), statementTimeoutMs, s.name);
      await init(s);
      s.health = 'up';
      s.failures = 0;
      emit({ type: 'server-up', server: s.name });
      notifyHealth();
      return 0;
    } catch (err) {
      markDown(s, err, isSetupError(err) ? 'refused' : 'down');
      return backoffMs(s.failures - 1, backoffInitialMs, backoffMaxMs);
    }
  }

  /**
   * Read the server's scheme. At first contact it must match the options (verified and
   * refused); after a reshard changed it, the allocator follows the server: uniqueness
   * comes from the scheme rows reshard wrote consistently across servers.
   */
  async function init(s: Server): Promise<void> {
    if (!s.verified) {
      try {
        await within(s.source.checkServer(s.name), statementTimeoutMs, s.name);
      } catch (err) {
        if (isIdleaseError(err, 'BAD_CONFIG')) s.configError = err;
        throw err;
      }
    }
    let scheme: TicketScheme;
    try {
      scheme = await within(s.source.readScheme(), statementTimeoutMs, s.name);
    } catch (err) {
      // A server without the ticket objects will not grow them by waiting: report it now.
      if (isIdleaseError(err, 'NOT_MIGRATED')) s.configError = withServerName(err, s.name, { offset: s.configuredOffset, increment });
      throw err;
    }
    if (!scheme.open) throw new Error(`${s.name}: a reshard is in progress (scheme closed); retrying`);
    if (!s.verified && (scheme.increment !== increment || scheme.offset !== s.configuredOffset)) {
      s.configError = new IdleaseError(
        'BAD_CONFIG',
        `${s.name} serves offset ${scheme.offset} of increment ${scheme.increment} (its ticket scheme row), but the allocator was given offset ${s.configuredOffset} of increment ${increment}. ` +
          'Fix the options, or move the servers to the new scheme with: idlease tickets reshard.',
      );
      throw s.configError;
    }
    s.configError = undefined;
    s.verified = true;
    s.increment = scheme.increment;
    s.offset = scheme.offset;
    s.source.setPair(scheme);
    s.generation = scheme.generation;
  }

  type Attempt = { id: bigint } | { failed: unknown };

  async function attempt(s: Server, deadline: number): Promise<Attempt> {
    const bound = () => Math.max(1, Math.min(statementTimeoutMs, deadline - Date.now()));
    let lockConflicts = 0;
    for (let refenced = 0; ; ) {
      try {
        if (s.generation === undefined) await init(s);
        // The pair this draw runs under: a concurrent call may move the server to a newer
        // scheme while this one is in flight, and this ID must be checked against its own.
        const { increment: inc, offset: off } = s;
        const id = await within(s.source.draw(s.generation!), bound(), s.name);
        if (id === undefined) {
          // Fenced by a reshard: follow the new scheme if it is open already.
          s.generation = undefined;
          if (++refenced > 3) throw new Error(`${s.name}: resharded while drawing; retrying`);
          continue;
        }
        const why = refuseReason(id, inc, off);
        if (why) {
          const err = new IdleaseError(isExhausted(id) ? 'EXHAUSTED' : 'INVARIANT', `${s.name}: ${why}. The ID was not handed out; the server left the rotation.`);
          markDown(s, err, 'refused');
          return { failed: err };
        }
        // Concurrent draws finish out of order: keep the highest, for status().
        if (s.lastIssued === undefined || id > s.lastIssued) s.lastIssued = id;
        s.served++;
        served++;
        return { id };
      } catch (err) {
        if (isLockConflict(err)) s.lockConflicts++;
        if (isLockConflict(err) && ++lockConflicts <= lockRetries && Date.now() < deadline) {
          await SYSTEM_CLOCK.sleep(Math.random() * Math.min(50, 2 ** lockConflicts));
          continue;
        }
        if (isLockConflict(err)) return { failed: err }; // alive but contended: try another server
        if (isIdleaseError(err, 'NOT_MIGRATED')) s.configError = withServerName(err, s.name, { offset: s.configuredOffset, increment });
        const refused = isSetupError(err) || isIdleaseError(err, 'EXHAUSTED');
        markDown(s, err, refused ? 'refused' : 'down');
        return { failed: err };
      }
    }
  }

  async function waitForHealth(deadline: number): Promise<void> {
    const wait = wakeableSleep(SYSTEM_CLOCK, Math.max(0, deadline - Date.now()));
    healthWaiters.add(wait.wake);
    await wait.done;
    healthWaiters.delete(wait.wake); // a waiter that timed out must not pile up during a long outage
  }

  async function next(): Promise<bigint> {
    if (closed) throw new IdleaseError('CLOSED', 'The ticket allocator was closed; create a new one.');
    const deadline = Date.now() + timeoutMs;
    const causes: unknown[] = [];
    for (;;) {
      if (closed) throw new IdleaseError('CLOSED', 'The ticket allocator was closed while next() was waiting for a server.');
      const start = rr++ % servers.length;
      let tried = 0;
      for (let i = 0; i < servers.length; i++) {
        const s = servers[(start + i) % servers.length]!;
        if (s.health !== 'up') continue;
        tried++;
        const r = await attempt(s, deadline);
        if ('id' in r) return r.id;
        causes.push(r.failed);
        if (closed) throw new IdleaseError('CLOSED', 'The ticket allocator was closed while next() was running.');
        if (Date.now() >= deadline) break;
      }
      if (Date.now() >= deadline) break;
      // Refusals are about configuration or data, not health: waiting will not fix them.
      if (servers.every((s) => s.health === 'refused')) break;
      if (tried === 0 || servers.every((s) => s.health !== 'up')) await waitForHealth(deadline);
    }
    const configErrors = servers.map((s) => s.configError).filter((e): e is IdleaseError => e !== undefined);
    if (configErrors.length === servers.length) throw configErrors[0]!;
    const refusal = [...causes].reverse().find((e) => isIdleaseError(e, 'INVARIANT') || isIdleaseError(e, 'EXHAUSTED'));
    if (refusal && servers.every((s) => s.health === 'refused')) throw refusal;
    const last = causes.at(-1);
    const why = servers.map((s) => `${s.name}: ${s.health}${s.lastError ? ` — ${s.lastError}` : ''}`).join('; ');
    const err = new IdleaseError(
      'DB_UNAVAILABLE',
      `No ticket server produced an ID within ${timeoutMs} ms (${why}). Check the servers (idlease tickets status) or raise timeoutMs.`,
      { cause: last, cli: { message: `No ticket server produced an ID within ${timeoutMs / 1000} s (${why}). Check the servers (idlease tickets status with the same --server flags), then rerun (--wait <seconds> waits longer).` } },
    );
    timeouts++;
    emit({ type: 'timeout', error: err });
    throw err;
  }

  return Object.freeze({
    next,
    async ready() {
      await Promise.all(
        servers.map(async (s) => {
          try {
            await init(s);
          } catch (err) {
            markDown(s, err, isSetupError(err) ? 'refused' : 'down');
          }
        }),
      );
      const bad = servers.find((s) => s.configError);
      if (bad) throw bad.configError!;
    },
    async status(): Promise<TicketServerStatus[]> {
      return Promise.all(
        servers.map(async (s) => {
          let server: ServerFacts | undefined;
          try {
            server = await within(s.source.facts(), statementTimeoutMs, s.name);
          } catch {
            server = undefined;
          }
          return Object.freeze({
            name: s.name,
            offset: s.offset,
            increment: s.increment,
            health: s.health,
            lastIssued: s.lastIssued,
            failures: s.failures,
            lockConflicts: s.lockConflicts,
            lastError: s.lastError,
            server,
          });
        }),
      );
    },
    stats(): TicketStats {
      return Object.freeze({
        served,
        timeouts,
        closed,
        servers: Object.freeze(
          servers.map((s) =>
            Object.freeze({
              name: s.name, offset: s.offset, increment: s.increment, health: s.health, served: s.served, failures: s.failures,
              lockConflicts: s.lockConflicts, lastIssued: s.lastIssued, lastError: s.lastError, lastErrorAt: s.lastErrorAt,
            }),
          ),
        ),
      });
    },
    onEvent(listener: (event: TicketEvent) => void): () => void {
      if (typeof listener !== 'function') throw new IdleaseError('BAD_ARGUMENT', 'onEvent(listener): listener must be a function (event) => void.');
      return events.add(listener);
    },
    async close() {
      if (closed) return;
      closed = true;
      // A probe in flight is not waited for: it ends against closed connections.
      for (const s of servers) void s.prober.stop(0);
      notifyHealth();
      const shut = (async () => {
        await Promise.all(servers.map((s) => s.source.close()));
        await Promise.all(owned.map((k) => k.destroy()));
      })();
      if (await settlesWithin(shut, closeTimeoutMs)) await shut;
    },
  });
}
