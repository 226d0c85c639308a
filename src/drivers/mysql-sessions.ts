/**
 * A small pool of idlease's own MySQL sessions, opened with mysql2's createConnection on the
 * settings of a handle the app already has (where, as whom, over what TLS), never taken from the
 * app's pool: the ticket draw sets `auto_increment_increment/offset` on its session, and a
 * pooled connection carrying them would change the app's own AUTO_INCREMENT inserts.
 *
 * mysql2 is loaded on the first connection, so an app on PostgreSQL never loads it.
 */
import { engineOf } from '../dialects/engine.js';
import { inTransaction, type SqlExecutor, type SqlResult, type SqlValue } from '../dialects/sql.js';
import { isTransportError } from '../dialects/driver-errors.js';
import { keepTlsFallback, tlsFallbackFor } from './tls-fallback.js';
import { IdleaseError } from '../errors.js';
import { beforeDeadline } from '../runtime/deadline.js';
import { mysql2Result } from './mysql2.js';

/** Connection settings worth copying: where, as whom, over what. Driver tuning stays idlease's own. */
const COPIED = [
  'host',
  'port',
  'localAddress',
  'socketPath',
  'user',
  'password',
  'password1',
  'password2',
  'password3',
  'passwordSha1',
  'database',
  'ssl',
  'charset',
  'charsetNumber',
  'authPlugins',
  'insecureAuth',
  'enableCleartextPlugin',
] as const;

export interface MysqlSessionPoolOptions {
  /** The app handle's connection settings, asked for every new session. */
  readonly settings: () => Promise<Record<string, unknown>>;
  readonly max: number;
  /** Bound on opening one session (TCP, TLS, handshake, the connect hook). */
  readonly connectTimeoutMs: number;
  /** Runs on every new session before it is handed out (session variables); when it fails the session is closed. */
  readonly onConnect?: (session: SqlExecutor) => Promise<void>;
}

export interface MysqlSessionPool {
  acquire(): Promise<SqlExecutor>;
  /** Give a session back; `broken` (or a transport error it met, or its connection ending) closes it instead. */
  release(session: SqlExecutor, broken: boolean): void;
  /** Close every session now, busy ones too; waiting acquires fail with CLOSED. */
  close(): Promise<void>;
}

interface RawConnection {
  query(sql: string, values: readonly SqlValue[], callback: (err: Error | null, result: unknown) => void): unknown;
  connect(callback: (err: Error | null) => void): void;
  destroy(): void;
  on(event: 'error' | 'end', listener: (err?: Error) => void): void;
}

type CreateConnection = (options: Record<string, unknown>) => RawConnection;

let driver: Promise<CreateConnection> | undefined;

function createConnection(): Promise<CreateConnection> {
  driver ??= import('mysql2').then((m) => {
    const mod = ((m as { default?: unknown }).default ?? m) as { createConnection: CreateConnection };
    return (options) => mod.createConnection(options);
  });
  return driver;
}

function connectionOptions(settings: Record<string, unknown>, connectTimeoutMs: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of COPIED) if (settings[key] !== undefined && settings[key] !== null) out[key] = settings[key];
  // What the app's pools get per statement (drivers/mysql2.ts), these connections carry for good:
  // a per-statement options object costs mysql2 ~15 µs of CPU per query (measured: ~70 against
  // ~55 µs per draw), a fifth of the hot path.
  return keepTlsFallback(settings, {
    ...out,
    connectTimeout: connectTimeoutMs,
    supportBigNumbers: true,
    bigNumberStrings: true,
    rowsAsArray: true,
  });
}

const closedError = () => new IdleaseError('CLOSED', 'ticket sessions closed');

class Session implements SqlExecutor {
  // The driver hook: mysql2 speaks the MySQL protocol; engine.ts asks whether the server is MariaDB.
  readonly flavor = 'mysql' as const;
  broken = false;
  private readonly failed: (err: Error) => void;

  constructor(
    readonly conn: RawConnection,
    lost: () => void,
    /** The pool's: its sessions reach one server, asked what it is once between them. */
    readonly handle: object,
  ) {
    // A transport error means the server or the network went away: the idle sessions went the
    // same way, and handing them out one by one would fail one call each.
    this.failed = (err) => {
      if (!isTransportError(err)) return;
      this.broken = true;
      lost();
    };
    const end = () => {
      this.broken = true;
    };
    conn.on('error', end);
    conn.on('end', end);
  }

  run(text: string, values: readonly SqlValue[]): Promise<SqlResult> {
    return new Promise<SqlResult>((resolve, reject) => {
      // Returns void on purpose: a mysql2 Query has a throwing .then(), so it must never be the
      // value of a promise callback.
      this.conn.query(text, values, (err, result) => {
        if (err) {
          this.failed(err);
          reject(err);
        } else resolve(mysql2Result(result));
      });
    });
  }

  async transaction<T>(work: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    try {
      return await inTransaction(this, work);
    } catch (err) {
      // Its ROLLBACK may not have run: the session is not reused.
      this.broken = true;
      throw err;
    }
  }
}

export function mysqlSessionPool(options: MysqlSessionPoolOptions): MysqlSessionPool {
  const idle: Session[] = [];
  const all = new Set<Session>();
  const waiting: Array<{ resolve: (s: Session) => void; reject: (err: unknown) => void }> = [];
  let opening = 0;
  let closed = false;
  const handle = {};

  const dropIdle = () => {
    for (const s of idle.splice(0)) drop(s);
  };

  function drop(s: Session): void {
    all.delete(s);
    s.conn.destroy();
  }

  async function open(): Promise<Session> {
    const settings = connectionOptions(await options.settings(), options.connectTimeoutMs);
    try {
      return await openWith(settings);
    } catch (err) {
      // ssl-mode=PREFERRED (the default) against a server without TLS: plain text, as the pool does.
      const plain = tlsFallbackFor(settings, err);
      if (plain === undefined) throw err;
      return await openWith(connectionOptions(plain, options.connectTimeoutMs));
    }
  }

  async function openWith(settings: Record<string, unknown>): Promise<Session> {
    const create = await createConnection();
    const conn = create(settings);
    // An error after a timed-out connect (nobody listening any more) must not crash the process.
    conn.on('error', () => undefined);
    const connected = new Promise<Session>((resolve, reject) => {
      conn.connect((err) => (err ? reject(err) : resolve(new Session(conn, dropIdle, handle))));
    }).then(async (s) => {
      // A server idlease is not tested on (MySQL 8) is refused before a ticket is drawn on it.
      await engineOf(s);
      await options.onConnect?.(s);
      return s;
    });
    try {
      return await beforeDeadline(
        connected,
        options.connectTimeoutMs,
        () => new Error(`connect timed out after ${options.connectTimeoutMs} ms`),
      );
    } catch (err) {
      conn.destroy();
      throw err;
    }
  }

  function create(): Promise<Session> {
    opening++;
    return open().then(
      (s) => {
        opening--;
        if (closed) {
          s.conn.destroy();
          throw closedError();
        }
        all.add(s);
        return s;
      },
      (err: unknown) => {
        opening--;
        throw err;
      },
    );
  }

  return Object.freeze({
    acquire(): Promise<SqlExecutor> {
      if (closed) return Promise.reject(closedError());
      for (let s = idle.pop(); s !== undefined; s = idle.pop()) {
        if (!s.broken) return Promise.resolve(s);
        drop(s);
      }
      if (all.size + opening < options.max) return create();
      return new Promise<Session>((resolve, reject) => waiting.push({ resolve, reject }));
    },
    release(session: SqlExecutor, broken: boolean): void {
      const s = session as Session;
      if (!all.has(s)) return;
      if (broken || s.broken || closed) {
        drop(s);
        const w = waiting.shift();
        if (w) create().then(w.resolve, w.reject);
        return;
      }
      const w = waiting.shift();
      if (w) w.resolve(s);
      else idle.push(s);
    },
    async close(): Promise<void> {
      closed = true;
      for (const w of waiting.splice(0)) w.reject(closedError());
      idle.length = 0;
      for (const s of [...all]) drop(s);
    },
  });
}
