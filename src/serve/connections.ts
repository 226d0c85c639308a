/**
 * Bounds on what one client can make `idlease serve` hold, whatever it sends or fails to read.
 *
 * node:http parses every pipelined request that arrives in one chunk and emits them all at once:
 * 300 requests for 100,000 IDs each, sent on one socket by a client that never reads, made 300
 * responses of 2 MB in memory (87 MB → 901 MB). So requests on one connection run one at a time:
 * the next starts only when the previous response is written and the socket's buffer is below its
 * high-water mark ('drain' otherwise). A connection whose client does not read therefore holds at
 * most one response; one that keeps sending holds its unanswered requests, at most
 * `maxPipelined`, then is closed. A socket that neither reads nor writes for `idleTimeoutMs` is
 * closed by node (server.timeout), and `maxConnections` bounds how many sockets there are.
 */
import type http from 'node:http';
import type { Socket } from 'node:net';

export interface ConnectionLimits {
  /** Requests waiting on one connection before it is closed. Default 32. */
  readonly maxPipelined?: number;
  /** Open connections; beyond, new ones are closed at once (server.maxConnections). Default 1024. */
  readonly maxConnections?: number;
  /** A connection that moves no byte either way this long is closed. Default 30,000 ms. */
  readonly idleTimeoutMs?: number;
}

type Job = () => void;

interface Lane {
  busy: boolean;
  waiting: Job[];
}

const lanes = new WeakMap<Socket, Lane>();

/**
 * Runs each request's `job` in turn per connection. The job must call `done(res)` once it has
 * ended its response (the responders do).
 */
export function createConnectionLimiter(limits: ConnectionLimits = {}) {
  const maxPipelined = limits.maxPipelined ?? 32;

  function next(socket: Socket, lane: Lane): void {
    const job = lane.waiting.shift();
    if (job === undefined) {
      lane.busy = false;
      return;
    }
    job();
  }

  return {
    apply(server: http.Server): void {
      server.maxConnections = limits.maxConnections ?? 1024;
      server.timeout = limits.idleTimeoutMs ?? 30_000;
    },
    /** Run `job` now if the connection is free, else after the responses before it are flushed. */
    run(req: http.IncomingMessage, job: Job): void {
      const socket = req.socket;
      let lane = lanes.get(socket);
      if (lane === undefined) {
        lane = { busy: false, waiting: [] };
        lanes.set(socket, lane);
      }
      if (!lane.busy) {
        lane.busy = true;
        job();
        return;
      }
      if (lane.waiting.length >= maxPipelined) {
        // Answering would mean holding yet another response for a client that is not reading them.
        lane.waiting.length = 0;
        socket.destroy();
        return;
      }
      lane.waiting.push(job);
    },
    /** The response of the running job is ended: start the next one once the socket can take it. */
    done(res: http.ServerResponse): void {
      // req.socket stays set after the response detaches from the socket.
      const socket = res.req.socket;
      const lane = lanes.get(socket);
      if (lane === undefined) return;
      if (lane.waiting.length === 0) {
        lane.busy = false;
        return;
      }
      if (socket.destroyed) {
        lane.waiting.length = 0;
        lane.busy = false;
        return;
      }
      if (socket.writableNeedDrain) socket.once('drain', () => next(socket, lane));
      else setImmediate(() => next(socket, lane));
    },
  };
}

export type ConnectionLimiter = ReturnType<typeof createConnectionLimiter>;
