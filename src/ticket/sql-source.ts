/**
 * Ticket sources on the databases: the dialect's statements (src/dialects/tickets.ts) on the
 * executor seam. PostgreSQL draws run on the app's own handle; MySQL draws on sessions of
 * idlease's own (drivers/mysql-sessions.ts), each carrying the server's pair.
 */
import {
  fenceFailover,
  galeraPairProblem,
  pingTicketServer,
  readScheme,
  setTicketSession,
  ticketCounterFacts,
  ticketDraw,
  type TicketPair,
  type TicketRef,
  type TicketScheme,
} from '../dialects/tickets.js';
import { declaredEngine } from '../dialects/engine.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { mysqlSessionPool } from '../drivers/mysql-sessions.js';
import type { TicketSource } from './source.js';

export interface SqlTicketSourceOptions {
  readonly ref: TicketRef;
  /** The pair the options name: what new MySQL sessions start with before the server's scheme is read. */
  readonly pair: TicketPair;
  /** MySQL: most sessions open at once. */
  readonly sessions: number;
  readonly connectTimeoutMs: number;
  readonly lockWaitTimeoutS: number;
}

/** PostgreSQL: nextval holds no session state, so the app's handle serves every call. */
export function postgresTicketSource(db: SqlExecutor, ref: TicketRef): TicketSource {
  const draw = ticketDraw(declaredEngine(db).sql, ref);
  return Object.freeze({
    draw: (scheme: TicketScheme) => draw(db, scheme.generation),
    readScheme: () => readScheme(db, ref),
    fenceFailover: () => fenceFailover(db, ref),
    async facts() {
      const scheme = await readScheme(db, ref);
      return { scheme, ...(await ticketCounterFacts(db, ref)) };
    },
    probe: () => pingTicketServer(db),
    async close() {},
  });
}

/** Both numbers fit 16 bits (MySQL's range): one number names the pair, with nothing to allocate per draw. */
const pairKey = (pair: TicketPair) => pair.increment * 65_536 + pair.offset;

/**
 * MySQL: every statement runs on a session of idlease's own, set up with the pair, so my.cnf
 * does not matter and the app's connections never carry it. A reshard changes the pair: a
 * session still on the old one is set again before it draws.
 */
export function mysqlTicketSource(settings: () => Promise<Record<string, unknown>>, options: SqlTicketSourceOptions): TicketSource {
  const { ref, lockWaitTimeoutS } = options;
  const pairs = new WeakMap<SqlExecutor, number>();
  // The pair new sessions are set up with: the last one a draw asked for.
  let current: TicketPair = options.pair;
  const setPair = async (session: SqlExecutor, pair: TicketPair) => {
    await setTicketSession(session, pair, lockWaitTimeoutS);
    pairs.set(session, pairKey(pair));
  };
  const sessions = mysqlSessionPool({
    settings,
    max: options.sessions,
    connectTimeoutMs: options.connectTimeoutMs,
    onConnect: (session) => setPair(session, current),
  });
  const draw = ticketDraw('mysql', ref);

  function onSession<T>(pair: TicketPair, work: (session: SqlExecutor) => Promise<T>): Promise<T> {
    return sessions.acquire().then((session) => {
      const ready = pairs.get(session) === pairKey(pair) ? work(session) : setPair(session, pair).then(() => work(session));
      return ready.then(
        (out) => {
          sessions.release(session, false);
          return out;
        },
        (err: unknown) => {
          // The pool itself closes a session whose connection failed; a statement error leaves it usable.
          sessions.release(session, false);
          throw err;
        },
      );
    });
  }

  return Object.freeze({
    draw(scheme: TicketScheme) {
      current = scheme;
      return onSession(scheme, (session) => draw(session, scheme.generation));
    },
    readScheme: () => onSession(current, (session) => readScheme(session, ref)),
    fenceFailover: () => onSession(current, (session) => fenceFailover(session, ref)),
    facts: () =>
      onSession(current, async (session) => {
        const scheme = await readScheme(session, ref);
        return { scheme, ...(await ticketCounterFacts(session, ref)) };
      }),
    probe: () => onSession(current, pingTicketServer),
    async checkServer(name: string) {
      const problem = await onSession(current, (session) => galeraPairProblem(session, name));
      if (problem) throw problem;
    },
    close: () => sessions.close(),
  });
}
