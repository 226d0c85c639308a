/**
 * Who gets a connection to `idlease serve`, and for how long: the bounds that keep one client —
 * a connection leak, a slowloris, a pipeliner that never reads — from holding the server for
 * the others (DESIGN invariant 10). Measured before these: 1,024 silent sockets from one client
 * stopped every other client for 26 s (the 1,025th connection was accepted and dropped without
 * an answer), and silent sockets lived ~17.9 s although the header deadline said 10 s.
 *
 * - **Per address**: at most `maxPerAddress` open connections from one client address (default
 *   128, an eighth of the global cap). A new one beyond it sheds that address's longest-idle
 *   socket (one that sent no complete request yet, waits between keep-alive requests, or does
 *   not read its answer); when all of its sockets are busy, the new one is answered
 *   `503 + Retry-After` and closed.
 * - **Globally**: at most `maxConnections` (default 1,024); beyond, the longest-idle socket of
 *   any address is shed, else the new one is answered `503 + Retry-After`. Node's own
 *   `maxConnections` (which drops without a word) stays as a backstop far above.
 * - **Header deadline**: a socket must deliver a complete request header within
 *   `headerTimeoutMs` (default 10 s) of connecting or of its previous answer, timed per socket
 *   (node checks its own `headersTimeout` only every `connectionsCheckingInterval`, 30 s by
 *   default, so sockets lived 10–40 s).
 * - **Idle deadline**: a socket being answered (or whose answer waits for its client to read)
 *   that moves no byte either way for `idleTimeoutMs` (default 30 s) is closed — checked by the
 *   same per-socket timer every sixth of that, so within 30–40 s. Node's own `server.timeout`
 *   did this with a timer re-armed on every read and write: ~0.7 µs of each ~18 µs request.
 * - **One global budget** for bytes of answers clients have not shown they read (`maxHeldBytes`,
 *   default 16 MiB): bytes written on a connection while more requests wait in its pipeline
 *   count until the pipeline is empty. The kernel takes megabytes per loopback socket, so a
 *   client that pipelines and never reads looks like a reader to `writableNeedDrain`; this does
 *   not. Over the budget the sockets holding the oldest are shed, and one connection holding
 *   256 KiB (one full batch) gets 503 for its next batch.
 *
 * Every shed and refusal is counted (prom-client families registered here) and logged at most
 * once per 10 s per kind, with how many were suppressed.
 */
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import { rawAnswer } from './http.js';

export interface GuardLimits {
  /** Open connections at most. Default 1024. */
  readonly maxConnections?: number;
  /** Open connections from one client address at most. Default 128. */
  readonly maxConnectionsPerAddress?: number;
  /** A complete request header must arrive within this of connecting or of the previous answer. Default 10,000 ms. */
  readonly headerTimeoutMs?: number;
  /** Bytes of answers written but not read by their clients, across all connections. Default 16 MiB. */
  readonly maxHeldBytes?: number;
  /** A connection being answered that moves no byte either way this long is closed. Default 30,000 ms. */
  readonly idleTimeoutMs?: number;
}

export const DEFAULT_MAX_CONNECTIONS = 1024;
export const DEFAULT_MAX_PER_ADDRESS = 128;
export const DEFAULT_HEADER_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_HELD_BYTES = 16 * 1024 * 1024;
export const DEFAULT_IDLE_TIMEOUT_MS = 30_000;
/** Pipelined answer bytes one connection may hold before its next batch is refused: one batch of 10,000 IDs (~220 KB) and a little. */
const MAX_HELD_PER_CONNECTION = 256 * 1024;

/** fresh: no complete request yet; busy: a request is being answered; idle: between keep-alive requests (nothing pipelined); stalled: its answer waits for the client to read. */
type State = 'fresh' | 'busy' | 'idle' | 'stalled';

interface Conn {
  readonly socket: Socket;
  readonly address: string;
  state: State;
  /** When it became fresh or idle: its header deadline counts from here. */
  since: number;
  /** The deadline timer, left running across requests (re-armed for the rest when it fires early): no timer per request on the hot path. */
  timer: NodeJS.Timeout | undefined;
  /** Bytes read and written when the timer last looked while it was busy or stalled, and when they last changed. */
  moved: number;
  movedAt: number;
  /** socket.bytesWritten when a request last waited in its empty pipeline (read then, not per request: the getter copies the write buffer). */
  mark: number;
  /** Bytes written since: answers to requests it pipelined, which it has not shown it reads. */
  held: number;
}

/** Logs one line per kind of event at most every 10 s, with the count of those not logged. */
export function rateLimitedLog(logger: Logger, intervalMs = 10_000): (event: string, fields: Record<string, unknown>, msg: string) => void {
  const last = new Map<string, { at: number; suppressed: number }>();
  return (event, fields, msg) => {
    const now = Date.now();
    const s = last.get(event);
    if (s !== undefined && now - s.at < intervalMs) {
      s.suppressed++;
      return;
    }
    logger.warn({ event, ...fields, ...(s && s.suppressed > 0 ? { suppressed: s.suppressed } : {}) }, msg);
    last.set(event, { at: now, suppressed: 0 });
  };
}

/** The client address a cap counts against (an IPv4 address mapped into IPv6 is the IPv4 one). */
function addressOf(socket: Socket): string {
  const a = socket.remoteAddress ?? '?';
  return a.startsWith('::ffff:') ? a.slice(7) : a;
}

export function createConnectionGuard(limits: GuardLimits, registry: Registry, log: ReturnType<typeof rateLimitedLog>) {
  const maxConnections = limits.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  const maxPerAddress = Math.min(limits.maxConnectionsPerAddress ?? DEFAULT_MAX_PER_ADDRESS, maxConnections);
  const headerTimeoutMs = limits.headerTimeoutMs ?? DEFAULT_HEADER_TIMEOUT_MS;
  const idleTimeoutMs = limits.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  const idleCheckMs = Math.max(1, Math.ceil(idleTimeoutMs / 6));
  const maxHeldBytes = limits.maxHeldBytes ?? DEFAULT_MAX_HELD_BYTES;
  const maxHeldPerConnection = Math.min(MAX_HELD_PER_CONNECTION, maxHeldBytes);

  const conns = new Map<Socket, Conn>();
  const perAddress = new Map<string, number>();
  // Sockets holding unconfirmed bytes, oldest first: what the held-bytes budget sheds.
  const holding = new Set<Conn>();
  let heldBytes = 0;

  const open = new Gauge({ name: 'idlease_serve_connections', help: 'Open HTTP connections', registers: [registry] });
  open.set(0);
  const held = new Gauge({
    name: 'idlease_serve_held_bytes',
    help: 'Bytes of answers written but not yet read by their clients (the global budget, --max-held-bytes)',
    registers: [registry],
  });
  held.set(0);
  const shed = new Counter({
    name: 'idlease_serve_connections_shed_total',
    help: 'Connections closed by the server to make room or keep the bounds (reason: per_address, global, header_timeout, idle_timeout, held_bytes)',
    labelNames: ['reason'],
    registers: [registry],
  });
  const refused = new Counter({
    name: 'idlease_serve_refused_total',
    help: 'Requests and connections answered 503 + Retry-After (reason: per_address, global: every open connection busy; queued_ids_global, queued_ids_per_address: the batch budget spent; held_per_connection: a connection holds 256 KiB of pipelined answers)',
    labelNames: ['reason'],
    registers: [registry],
  });
  for (const reason of ['per_address', 'global', 'header_timeout', 'idle_timeout', 'held_bytes']) shed.inc({ reason }, 0);
  for (const reason of ['per_address', 'global', 'queued_ids_global', 'queued_ids_per_address', 'held_per_connection'])
    refused.inc({ reason }, 0);

  // No per-request bookkeeping beyond a state and a time (this runs on the hot route): the
  // longest-idle socket is looked for only when room is needed, by one pass over the open ones.
  function longestIdle(address?: string): Conn | undefined {
    let best: Conn | undefined;
    for (const c of conns.values())
      if (c.state !== 'busy' && (address === undefined || c.address === address) && (best === undefined || c.since < best.since)) best = c;
    return best;
  }

  function unhold(c: Conn): void {
    if (c.held === 0) return; // only a socket holding bytes is in \`holding\`
    holding.delete(c);
    heldBytes -= c.held;
    c.held = 0;
    held.set(heldBytes);
  }

  function armHeaderTimer(c: Conn): void {
    c.since = Date.now();
    if (c.timer === undefined) c.timer = setTimeout(() => deadline(c), Math.min(headerTimeoutMs, idleCheckMs)).unref();
  }

  /** The socket's one timer: the header deadline while it is fresh or idle, the idle deadline while it is busy or stalled. */
  function deadline(c: Conn): void {
    c.timer = undefined;
    if (!conns.has(c.socket)) return;
    const now = Date.now();
    if (c.state === 'fresh' || c.state === 'idle') {
      const left = c.since + headerTimeoutMs - now;
      // Woken at least every idleCheckMs, so a request that starts now is checked for idleness soon.
      if (left > 0) {
        c.timer = setTimeout(() => deadline(c), Math.min(left, idleCheckMs)).unref();
        return;
      }
      shed.inc({ reason: 'header_timeout' });
      log(
        'header-timeout',
        { address: c.address },
        `closed a connection that sent no complete request header within ${headerTimeoutMs} ms`,
      );
      forget(c);
      rawAnswer(c.socket, 408, 'Request Timeout', 'REQUEST_TIMEOUT', `No complete request header within ${headerTimeoutMs} ms.`);
      return;
    }
    const moved = c.socket.bytesRead + (c.socket.bytesWritten ?? 0);
    if (moved !== c.moved) {
      c.moved = moved;
      c.movedAt = now;
    } else if (now - c.movedAt >= idleTimeoutMs) {
      log('idle-timeout', { address: c.address }, `closed a connection that moved no byte for ${idleTimeoutMs} ms`);
      shedOne(c, 'idle_timeout');
      return;
    }
    c.timer = setTimeout(() => deadline(c), idleCheckMs).unref();
  }

  function forget(c: Conn): void {
    if (!conns.delete(c.socket)) return;
    clearTimeout(c.timer);
    unhold(c);
    const n = (perAddress.get(c.address) ?? 1) - 1;
    if (n === 0) {
      perAddress.delete(c.address);
    } else perAddress.set(c.address, n);
    open.set(conns.size);
  }

  function shedOne(c: Conn, reason: string): void {
    shed.inc({ reason });
    forget(c);
    c.socket.destroy();
  }

  function first<T>(set: Set<T> | undefined): T | undefined {
    if (set === undefined) return undefined;
    for (const v of set) return v;
    return undefined;
  }

  function refuse(socket: Socket, reason: 'per_address' | 'global', address: string): void {
    refused.inc({ reason });
    log(
      `refused-${reason}`,
      { address, open: conns.size, fromAddress: perAddress.get(address) ?? 0 },
      reason === 'global'
        ? `refused a connection: ${maxConnections} open and none idle (--max-connections)`
        : `refused a connection from ${address}: ${maxPerAddress} open from it and none idle (--max-connections-per-address)`,
    );
    rawAnswer(socket, 503, 'Service Unavailable', 'BUSY', 'Too many connections are busy; retry in a second.', 'retry-after: 1\r\n');
  }

  return {
    /** The server's 'connection' hook, run before node's: admit, make room, or refuse with 503. */
    admit(socket: Socket): void {
      const address = addressOf(socket);
      if ((perAddress.get(address) ?? 0) >= maxPerAddress) {
        const victim = longestIdle(address);
        if (victim === undefined) return refuse(socket, 'per_address', address);
        shedOne(victim, 'per_address');
        log(
          'shed-per-address',
          { address },
          `closed the longest-idle connection of ${address} to admit a new one (--max-connections-per-address ${maxPerAddress})`,
        );
      }
      if (conns.size >= maxConnections) {
        const victim = longestIdle();
        if (victim === undefined) return refuse(socket, 'global', address);
        shedOne(victim, 'global');
        log(
          'shed-global',
          { address: victim.address },
          `closed the longest-idle connection to admit a new one (--max-connections ${maxConnections})`,
        );
      }
      const c: Conn = { socket, address, state: 'fresh', since: 0, timer: undefined, moved: 0, movedAt: Date.now(), mark: 0, held: 0 };
      conns.set(socket, c);
      perAddress.set(address, (perAddress.get(address) ?? 0) + 1);
      armHeaderTimer(c);
      open.set(conns.size);
      socket.once('close', () => forget(c));
    },
    /** A request of this socket is being answered. */
    busy(socket: Socket): void {
      const c = conns.get(socket);
      if (c === undefined) return;
      c.state = 'busy';
    },
    /** A request waits in this socket's pipeline, which was empty: what it writes from now on may be held. */
    queued(socket: Socket): void {
      const c = conns.get(socket);
      if (c !== undefined && c.held === 0) c.mark = socket.bytesWritten;
    },
    /**
     * An answer was written on a socket whose pipeline is not empty: until it is (the client
     * waited for its answers before asking more), those bytes count as held. Over the global
     * budget, the sockets holding the oldest are shed.
     */
    wrote(socket: Socket): void {
      const c = conns.get(socket);
      if (c === undefined || socket.destroyed) return;
      const d = socket.bytesWritten - c.mark - c.held;
      if (d <= 0) return;
      c.held += d;
      heldBytes += d;
      held.set(heldBytes);
      holding.add(c);
      while (heldBytes > maxHeldBytes) {
        const victim = first(holding);
        if (victim === undefined) break;
        log(
          'shed-held-bytes',
          { address: victim.address, heldBytes },
          `closed the connection holding the oldest unconfirmed answers (held bytes over ${maxHeldBytes})`,
        );
        shedOne(victim, 'held_bytes');
      }
    },
    /**
     * May this socket's next batch run? Not when it already holds \`maxHeldPerConnection\` bytes
     * of pipelined answers (a client that sends many batch requests and does not read them
     * would otherwise be served until the kernel's buffers fill, megabytes per socket).
     */
    mayAnswerBatch(socket: Socket): boolean {
      const c = conns.get(socket);
      return c === undefined || c.held < maxHeldPerConnection;
    },
    /** Nothing is being answered on this socket now: it waits for the next request. */
    idle(socket: Socket): void {
      const c = conns.get(socket);
      if (c === undefined || socket.destroyed) return;
      c.state = 'idle';
      unhold(c);
      armHeaderTimer(c);
    },
    /** Its answer waits for the client to read it: the socket may be shed to make room. */
    stalled(socket: Socket): void {
      const c = conns.get(socket);
      if (c === undefined || socket.destroyed) return;
      c.state = 'stalled';
    },
    refused,
    /** The client address caps count against. */
    addressOf,
    /** Is this socket still one the guard admitted (not refused)? */
    admitted(socket: Socket): boolean {
      return conns.has(socket);
    },
    get size(): number {
      return conns.size;
    },
    /** Open connections by state, for the status page: one pass, when a page is made, none per request. */
    byState(): Record<State, number> {
      const n = { fresh: 0, busy: 0, idle: 0, stalled: 0 };
      for (const c of conns.values()) n[c.state]++;
      return n;
    },
    /** Node's own cap: a backstop far above ours (refused sockets live until their 503 is flushed). */
    backstop: maxConnections * 2 + 256,
  };
}

export type ConnectionGuard = ReturnType<typeof createConnectionGuard>;
