/**
 * Bounds on what one client can make `idlease serve` hold, whatever it sends or fails to read.
 *
 * node:http parses every pipelined request that arrives in one chunk and emits them all at once:
 * 300 requests for 100,000 IDs each, sent on one socket by a client that never reads, made 300
 * responses of 2 MB in memory (87 MB → 901 MB). So requests on one connection run one at a time:
 * the next starts only when the previous response is written and the socket's buffer is below its
 * high-water mark ('drain' otherwise). A connection whose client does not read therefore holds at
 * most one response; one that keeps sending holds its unanswered requests, at most
 * `maxPipelined`, then is closed. How many sockets there are, how long one may take to send a
 * header or move no byte, and how many unread bytes all of them may hold together is the
 * guard's (guard.ts), which this limiter tells when a socket is busy, idle or stalled on a
 * client that does not read.
 */
import type http from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectionGuard } from './guard.js';

export interface ConnectionLimits {
  /** Requests waiting on one connection before it is closed. Default 32. */
  readonly maxPipelined?: number;
}

/** A request waiting its turn on its connection. */
interface Waiting {
  readonly req: http.IncomingMessage;
  readonly res: http.ServerResponse;
}

interface Lane {
  busy: boolean;
  waiting: Waiting[];
}

const lanes = new WeakMap<Socket, Lane>();

/**
 * Runs `handle` for each request in turn per connection. It must call `done(res)` once it has
 * ended its response (the responders do). One handler for every request, not a closure per
 * request: the hot route allocates nothing here.
 */
export function createConnectionLimiter(
  limits: ConnectionLimits,
  guard: ConnectionGuard,
  handle: (req: http.IncomingMessage, res: http.ServerResponse) => void,
) {
  const maxPipelined = limits.maxPipelined ?? 32;

  function next(socket: Socket, lane: Lane): void {
    if (socket.destroyed) {
      lane.waiting.length = 0;
      lane.busy = false;
      return;
    }
    const w = lane.waiting.shift();
    if (w === undefined) {
      lane.busy = false;
      guard.idle(socket);
      return;
    }
    guard.busy(socket);
    handle(w.req, w.res);
  }

  return {
    apply(server: http.Server): void {
      server.maxConnections = guard.backstop;
      // No node socket timer while a request is answered: it is re-armed on every read and write
      // (~0.7 µs a request); the guard's one timer per socket keeps the idle deadline instead.
      server.timeout = 0;
    },
    /** Handle this request now if the connection is free, else after the responses before it are flushed. */
    run(req: http.IncomingMessage, res: http.ServerResponse): void {
      const socket = req.socket;
      let lane = lanes.get(socket);
      if (lane === undefined) {
        lane = { busy: false, waiting: [] };
        lanes.set(socket, lane);
      }
      if (!lane.busy) {
        lane.busy = true;
        guard.busy(socket);
        handle(req, res);
        return;
      }
      if (lane.waiting.length >= maxPipelined) {
        // Answering would mean holding yet another response for a client that is not reading them.
        lane.waiting.length = 0;
        socket.destroy();
        return;
      }
      if (lane.waiting.length === 0) guard.queued(socket);
      lane.waiting.push({ req, res });
    },
    /** The response of the running job is ended: start the next one once the socket can take it. */
    done(res: http.ServerResponse): void {
      // req.socket stays set after the response detaches from the socket.
      const socket = res.req.socket;
      const lane = lanes.get(socket);
      if (lane === undefined) return;
      if (socket.destroyed) {
        lane.waiting.length = 0;
        lane.busy = false;
        return;
      }
      if (lane.waiting.length > 0) guard.wrote(socket);
      // A client that does not read its answer gets no other until it does, pipelined or not.
      if (socket.writableNeedDrain) {
        guard.stalled(socket);
        socket.once('drain', () => next(socket, lane));
      } else if (lane.waiting.length === 0) next(socket, lane);
      else setImmediate(() => next(socket, lane));
    },
  };
}

export type ConnectionLimiter = ReturnType<typeof createConnectionLimiter>;
