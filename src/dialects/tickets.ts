/**
 * All ticket SQL: the Flickr tickets tables (MySQL/MariaDB), the sequences (Postgres), the
 * scheme table that fences resharding, and the one-statement draw on each.
 *
 * The scheme table holds, per sequence, the (increment, offset) this server is meant to
 * serve and a generation number. Every draw names the generation it believes in, inside
 * the same statement, so `reshard` can fence out allocators that still hold the old
 * scheme: their draw inserts nothing and they learn it from the same OK packet.
 */
import type { Knex } from 'knex';
import { isMissingTable, knexCatalogQuery, notMigratedError, olderInstallSchema, relationExists } from './missing-object.js';
import { type Flavor, ownObject, ownSchema, quoteIdent } from './detect.js';
import { affectedRows, rowsOf } from './results.js';
import { IdleaseError } from '../errors.js';
import { toBigInt } from '../ids.js';
import { beforeDeadline } from '../runtime/deadline.js';

export const TICKET_TABLE_PREFIX = 'idlease_tickets_';
export const SCHEME_TABLE = 'idlease_ticket_schemes';
export type TicketEngine = 'InnoDB' | 'MyISAM';

export interface TicketRef {
  readonly schema: string | undefined;
  /** Validated sequence name. */
  readonly sequence: string;
}

export interface TicketScheme {
  readonly generation: bigint;
  readonly increment: number;
  readonly offset: number;
  readonly open: boolean;
}

/** Table (MySQL) or sequence (Postgres) name for a sequence name. */
export function ticketObjectName(sequence: string): string {
  return TICKET_TABLE_PREFIX + sequence;
}

function schemeTable(flavor: Flavor, schema: string | undefined): string {
  return ownObject(flavor, schema, SCHEME_TABLE);
}

/**
 * DDL values cannot be bound (neither MySQL nor Postgres takes parameters in utility
 * statements), so integers are inlined — only ever from a validated number/bigint.
 */
function intLiteral(value: number | bigint): string {
  if (typeof value === 'number' && !Number.isSafeInteger(value)) throw new IdleaseError('BAD_CONFIG', `not an integer: ${value}`);
  return BigInt(value).toString();
}

export function ticketsDdl(
  flavor: Flavor,
  ref: TicketRef,
  opts: { engine: TicketEngine; increment: number; offset: number },
): { up: string[]; down: string[]; seed: (knex: Knex) => Promise<void>; unseed: (knex: Knex) => Promise<void> } {
  const obj = ownObject(flavor, ref.schema, ticketObjectName(ref.sequence));
  const schemes = schemeTable(flavor, ref.schema);
  const seed = async (knex: Knex): Promise<void> => {
    // Insert-if-missing: re-running a migration must not reset a resharded scheme.
    const sql =
      flavor === 'mysql'
        ? `INSERT IGNORE INTO ${schemes} (sequence_name, generation, increment_by, offset_by, is_open) VALUES (?, 1, ?, ?, 1)`
        : `INSERT INTO ${schemes} (sequence_name, generation, increment_by, offset_by, is_open) VALUES (?, 1, ?, ?, true) ON CONFLICT (sequence_name) DO NOTHING`;
    await knex.raw(sql, [ref.sequence, opts.increment, opts.offset]);
  };
  // Down removes what up created: the scheme table goes with its last row (other ticket
  // sequences in the same schema keep it while they exist).
  const unseed = async (knex: Knex): Promise<void> => {
    await knex.raw(`DELETE FROM ${schemes} WHERE sequence_name = ?`, [ref.sequence]);
    const left = rowsOf(flavor, await knex.raw(`SELECT COUNT(*) AS n FROM ${schemes}`))[0];
    if (Number(left?.n ?? 0) === 0) await knex.raw(`DROP TABLE IF EXISTS ${schemes}`);
  };
  if (flavor === 'mysql') {
    return {
      up: [
        `CREATE TABLE IF NOT EXISTS ${schemes} (
  sequence_name varchar(64) NOT NULL PRIMARY KEY,
  generation bigint NOT NULL,
  increment_by int NOT NULL,
  offset_by int NOT NULL,
  is_open tinyint NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
        `CREATE TABLE IF NOT EXISTS ${obj} (
  id bigint unsigned NOT NULL AUTO_INCREMENT,
  stub char(1) NOT NULL DEFAULT '',
  PRIMARY KEY (id),
  UNIQUE KEY stub (stub)
) ENGINE=${opts.engine}`,
      ],
      down: [`DROP TABLE IF EXISTS ${obj}`],
      seed,
      unseed,
    };
  }
  return {
    up: [
      `CREATE TABLE IF NOT EXISTS ${schemes} (
  sequence_name varchar(64) PRIMARY KEY,
  generation bigint NOT NULL,
  increment_by integer NOT NULL,
  offset_by integer NOT NULL,
  is_open boolean NOT NULL
)`,
      `CREATE SEQUENCE IF NOT EXISTS ${obj} AS bigint INCREMENT BY ${intLiteral(opts.increment)} MINVALUE 1 START WITH ${intLiteral(opts.offset)} NO CYCLE`,
    ],
    down: [`DROP SEQUENCE IF EXISTS ${obj}`],
    seed,
    unseed,
  };
}


/** The ticket objects of `ref` are missing on this server: NOT_MIGRATED naming the migrate that installs them. */
async function notMigrated(knex: Knex, flavor: Flavor, ref: TicketRef, cause: unknown): Promise<IdleaseError> {
  const explicitSchema = ref.schema !== undefined && flavor !== 'mysql';
  const schema = ownSchema(flavor, ref.schema);
  return notMigratedError({
    what: `The ticket objects for sequence "${ref.sequence}" are missing on this server${flavor === 'mysql' ? '' : ` (schema ${schema})`}.`,
    call: `migrate(knex, { ${explicitSchema ? `schema: '${ref.schema}', ` : ''}tickets: { sequences: ['${ref.sequence}'] } })`,
    flags: `${explicitSchema ? `--schema ${ref.schema} ` : ''}--no-segments --tickets ${ref.sequence}`,
    olderIn: await olderInstallSchema(
      knexCatalogQuery(knex, flavor),
      flavor !== 'mysql', ref.schema !== undefined, schema ?? '', flavor === 'mysql' ? ticketObjectName(ref.sequence) : SCHEME_TABLE,
    ),
    ownSchema: schema,
    cause,
  });
}

/**
 * The last ticket this server's counter issued (MySQL: the tickets table's id; PostgreSQL: the
 * sequence's last_value once called); undefined when none was, or the object is missing.
 */
export async function lastIssuedTicket(knex: Knex, flavor: Flavor, ref: TicketRef): Promise<bigint | undefined> {
  const obj = ownObject(flavor, ref.schema, ticketObjectName(ref.sequence));
  const query = knexCatalogQuery(knex, flavor);
  if (!(await relationExists(query, flavor !== 'mysql', obj))) return undefined;
  try {
    if (flavor === 'mysql') {
      const row = rowsOf(flavor, await knex.raw(`SELECT MAX(id) AS last FROM ${obj}`))[0];
      return row?.last == null ? undefined : toBigInt(row.last, 'last id');
    }
    const row = rowsOf(flavor, await knex.raw(`SELECT last_value, is_called FROM ${obj}`))[0];
    return row && (row.is_called === true || row.is_called === 't') ? toBigInt(row.last_value, 'last_value') : undefined;
  } catch (err) {
    if (isMissingTable(err)) return undefined;
    throw err;
  }
}

export async function readScheme(knex: Knex, flavor: Flavor, ref: TicketRef): Promise<TicketScheme> {
  let res: unknown;
  try {
    res = await knex.raw(
      `SELECT generation, increment_by, offset_by, is_open FROM ${schemeTable(flavor, ref.schema)} WHERE sequence_name = ?`,
      [ref.sequence],
    );
  } catch (err) {
    if (isMissingTable(err)) throw await notMigrated(knex, flavor, ref, err);
    throw err;
  }
  const row = rowsOf(flavor, res)[0];
  if (!row) throw await notMigrated(knex, flavor, ref, undefined);
  return {
    generation: toBigInt(row.generation, 'generation'),
    increment: Number(row.increment_by),
    offset: Number(row.offset_by),
    open: row.is_open === true || Number(row.is_open) === 1,
  };
}

/** What `status()` shows about a server, as the server itself sees it. */
export interface ServerFacts {
  readonly scheme: TicketScheme;
  /** MySQL: the session's @@auto_increment_increment/offset on a connection idlease set up. */
  readonly sessionIncrement?: number;
  readonly sessionOffset?: number;
  /** MySQL: the server's own (my.cnf) pair, which idlease's sessions override. */
  readonly globalIncrement?: number;
  readonly globalOffset?: number;
  /** MySQL: InnoDB/MyISAM. Postgres: 'sequence'. */
  readonly engine: string;
  /** Highest ticket issued so far, if any. */
  readonly lastId: bigint | undefined;
}

/**
 * One server's ticket source. `draw(generation)` returns the new ID, or `undefined` when
 * the server's scheme is no longer that generation (fenced by a reshard).
 */
export interface TicketSource {
  draw(generation: bigint): Promise<bigint | undefined>;
  /** The pair the server now serves (after a reshard); MySQL re-sets each connection's session once. */
  setPair(pair: { increment: number; offset: number }): void;
  readScheme(): Promise<TicketScheme>;
  facts(): Promise<ServerFacts>;
  /** Cheap liveness check on a fresh connection. */
  probe(): Promise<void>;
  /** Server settings that would break the pair (Galera's auto-increment control): BAD_CONFIG naming the fix. */
  checkServer(name: string): Promise<void>;
  close(): Promise<void>;
}

// ---------------------------------------------------------------- MySQL / MariaDB

/**
 * A Galera node with wsrep_auto_increment_control=ON (the default) sets
 * auto_increment_increment/offset from the cluster size, over idlease's session pair, and
 * rewrites the pair of connections already open when a node leaves or joins (seen: 2/1 and
 * 2/2 instead of 3/1 and 3/3). The residue check then refuses those IDs and the server
 * flaps between refused and up. SHOW VARIABLES, not @@wsrep_on: MySQL has no such variable.
 */
export async function galeraPairProblem(knex: Knex, name: string): Promise<IdleaseError | undefined> {
  const res = await knex.raw("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_auto_increment_control')");
  const vars = new Map(rowsOf('mysql', res).map((r) => [String(r.Variable_name).toLowerCase(), String(r.Value).toUpperCase()]));
  if (vars.get('wsrep_on') !== 'ON' || vars.get('wsrep_auto_increment_control') !== 'ON') return undefined;
  return new IdleaseError(
    'BAD_CONFIG',
    `${name} is a Galera node with wsrep_auto_increment_control=ON: Galera then sets auto_increment_increment/offset from the cluster size, ` +
      "over the ticket allocator's pair, and changes them on open connections when a node leaves or joins. " +
      'Turn it off on every node (SET GLOBAL wsrep_auto_increment_control = OFF, and wsrep_auto_increment_control = OFF in my.cnf), ' +
      'and give each node its own database for the ticket tables (docs/failover.md, Galera).',
  );
}

/**
 * The draw. LOCK IN SHARE MODE makes the scheme row's shared lock explicit: under
 * REPEATABLE READ InnoDB takes it for INSERT … SELECT anyway, but under READ COMMITTED
 * the read would be a snapshot and a reshard's fence would not wait for the draw.
 */
export function mysqlDrawSql(ref: TicketRef): string {
  const table = ownObject('mysql', ref.schema, ticketObjectName(ref.sequence));
  return `REPLACE INTO ${table} (stub) SELECT 'a' FROM ${schemeTable('mysql', ref.schema)} WHERE sequence_name = ? AND generation = ? AND is_open = 1 LOCK IN SHARE MODE`;
}

interface RawMysqlConnection {
  __idleasePair?: string;
  query(sql: string, values: unknown[], cb: (err: Error | null, result: unknown) => void): void;
  destroy(): void;
  __knex__disposed?: unknown;
  on(event: 'error', fn: (err: Error) => void): void;
}

interface KnexClientInternals {
  acquireRawConnection(): Promise<RawMysqlConnection>;
  destroyRawConnection(c: RawMysqlConnection): Promise<void>;
}

function q(conn: RawMysqlConnection, sql: string, values: unknown[] = []): Promise<unknown> {
  return new Promise((resolve, reject) => conn.query(sql, values, (err, result) => (err ? reject(err) : resolve(result))));
}

/**
 * MySQL source: own connections (not the app's pool, so the session variables idlease
 * sets never leak into the app's own inserts), each set up once with
 * `SET SESSION auto_increment_increment/offset` so my.cnf does not matter.
 * The draw is `REPLACE … SELECT … FROM schemes WHERE generation = ?`: one round trip, the
 * insert id in the OK packet, and an insert of zero rows when the scheme moved on.
 */
export function mysqlTicketSource(
  knex: Knex,
  ref: TicketRef,
  initialPair: { increment: number; offset: number },
  opts: { maxConnections: number; connectTimeoutMs: number; lockWaitTimeoutS: number },
): TicketSource {
  const flavor: Flavor = 'mysql';
  const client = knex.client as unknown as KnexClientInternals;
  const table = ownObject(flavor, ref.schema, ticketObjectName(ref.sequence));
  const schemes = schemeTable(flavor, ref.schema);
  const drawSql = mysqlDrawSql(ref);
  const idle: RawMysqlConnection[] = [];
  const waiting: Array<(c: RawMysqlConnection | Error) => void> = [];
  let open = 0;
  let closed = false;
  let pair = { ...initialPair };

  async function create(): Promise<RawMysqlConnection> {
    const pending = client.acquireRawConnection();
    try {
      return await beforeDeadline(pending, opts.connectTimeoutMs, () => new Error(`connect timed out after ${opts.connectTimeoutMs} ms`));
    } catch (err) {
      pending.then((c) => c.destroy(), () => undefined);
      throw err;
    }
  }

  async function acquire(): Promise<RawMysqlConnection> {
    const conn = await acquireRaw();
    const want = `${pair.increment}/${pair.offset}`;
    if (conn.__idleasePair !== want) {
      try {
        // The lock-wait bound sits below the allocator's statement bound, so a row lock held
        // elsewhere ends as a retryable 1205 here instead of looking like a dead server.
        await q(conn, 'SET SESSION auto_increment_increment = ?, auto_increment_offset = ?, innodb_lock_wait_timeout = ?', [
          pair.increment,
          pair.offset,
          opts.lockWaitTimeoutS,
        ]);
      } catch (err) {
        release(conn, true);
        throw err;
      }
      conn.__idleasePair = want;
    }
    return conn;
  }

  async function acquireRaw(): Promise<RawMysqlConnection> {
    if (closed) throw new IdleaseError('CLOSED', 'ticket source closed');
    while (idle.length > 0) {
      const c = idle.pop()!;
      if (!c.__knex__disposed) return c;
      open--;
      c.destroy();
    }
    if (open < opts.maxConnections) {
      open++;
      try {
        return await create();
      } catch (err) {
        open--;
        throw err;
      }
    }
    return new Promise((resolve, reject) => waiting.push((c) => (c instanceof Error ? reject(c) : resolve(c))));
  }

  function release(conn: RawMysqlConnection, broken: boolean): void {
    if (broken || closed || conn.__knex__disposed) {
      open--;
      conn.destroy();
      const w = waiting.shift();
      if (w) {
        if (closed) w(new IdleaseError('CLOSED', 'ticket source closed'));
        else {
          open++;
          create().then(w, (err: Error) => {
            open--;
            w(err);
          });
        }
      }
      return;
    }
    const w = waiting.shift();
    if (w) w(conn);
    else idle.push(conn);
  }

  async function withConn<T>(fn: (c: RawMysqlConnection) => Promise<T>): Promise<T> {
    const conn = await acquire();
    let broken = true;
    try {
      const out = await fn(conn);
      broken = false;
      return out;
    } catch (err) {
      // A statement error (deadlock, lock wait) leaves the connection usable; a transport
      // error does not. Only errors with an SQL errno are statement errors.
      broken = typeof (err as { errno?: unknown }).errno !== 'number' || (err as { fatal?: boolean }).fatal === true;
      throw err;
    } finally {
      release(conn, broken);
    }
  }

  return {
    draw(generation) {
      // The hot path: callbacks, not async layers — on a busy 2-core box every microtask
      // hop shows up against the raw driver loop.
      return new Promise<bigint | undefined>((resolve, reject) => {
        // Returns void on purpose: a mysql2 Query has a throwing .then(), so it must never
        // be the value of a promise callback.
        const run = (conn: RawMysqlConnection): void => {
          conn.query(drawSql, [ref.sequence, generation.toString()], (err, result) => {
            if (err) {
              release(conn, typeof (err as { errno?: unknown }).errno !== 'number' || (err as { fatal?: boolean }).fatal === true);
              reject(err);
              return;
            }
            release(conn, false);
            const res = result as { affectedRows: number; insertId: unknown };
            if (res.affectedRows === 0) resolve(undefined);
            else {
              try {
                resolve(toBigInt(res.insertId, 'insertId'));
              } catch (e) {
                reject(e);
              }
            }
          });
        };
        const want = `${pair.increment}/${pair.offset}`;
        const ready = idle.length > 0 && !idle[idle.length - 1]!.__knex__disposed && idle[idle.length - 1]!.__idleasePair === want;
        const safeRun = (conn: RawMysqlConnection): void => {
          try {
            run(conn);
          } catch (err) {
            release(conn, true);
            reject(err);
          }
        };
        if (ready) safeRun(idle.pop()!);
        else acquire().then(safeRun, reject);
      });
    },
    setPair(next) {
      pair = { increment: next.increment, offset: next.offset };
    },
    readScheme: () => readScheme(knex, flavor, ref),
    async facts() {
      const scheme = await readScheme(knex, flavor, ref);
      return withConn(async (c) => {
        const vars = (await q(
          c,
          'SELECT @@session.auto_increment_increment AS inc, @@session.auto_increment_offset AS off, @@global.auto_increment_increment AS ginc, @@global.auto_increment_offset AS goff',
        )) as Array<Record<string, unknown>>;
        const eng = (await q(
          c,
          'SELECT ENGINE AS engine FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?',
          [ticketObjectName(ref.sequence)],
        )) as Array<Record<string, unknown>>;
        const last = (await q(c, `SELECT MAX(id) AS last FROM ${table}`)) as Array<Record<string, unknown>>;
        return {
          scheme,
          sessionIncrement: Number(vars[0]?.inc),
          sessionOffset: Number(vars[0]?.off),
          globalIncrement: Number(vars[0]?.ginc),
          globalOffset: Number(vars[0]?.goff),
          engine: String(eng[0]?.engine ?? 'unknown'),
          lastId: last[0]?.last == null ? undefined : toBigInt(last[0].last, 'last id'),
        };
      });
    },
    async probe() {
      const conn = await create();
      open++;
      release(conn, false);
    },
    async checkServer(name) {
      const problem = await galeraPairProblem(knex, name);
      if (problem) throw problem;
    },
    async close() {
      closed = true;
      for (const w of waiting.splice(0)) w(new IdleaseError('CLOSED', 'ticket source closed'));
      for (const c of idle.splice(0)) {
        open--;
        c.destroy();
      }
    },
  };
}

// ---------------------------------------------------------------- Postgres / PGlite

/**
 * Postgres source: `nextval` on a sequence whose INCREMENT BY/START WITH is the pair. The
 * scheme row is read in the same statement, so a reshard that took its ACCESS EXCLUSIVE
 * lock on the scheme table fences every draw that starts after it.
 */
export function postgresTicketSource(knex: Knex, flavor: Flavor, ref: TicketRef): TicketSource {
  const seq = ownObject(flavor, ref.schema, ticketObjectName(ref.sequence));
  const schemes = schemeTable(flavor, ref.schema);
  // The regclass literal is a validated, quoted identifier: never user text.
  const drawSql = `SELECT nextval('${seq}') AS id FROM ${schemes} WHERE sequence_name = ? AND generation = ? AND is_open`;
  return {
    async draw(generation) {
      let res: unknown;
      try {
        res = await knex.raw(drawSql, [ref.sequence, generation.toString()]);
      } catch (err) {
        if (isMissingTable(err)) throw await notMigrated(knex, flavor, ref, err);
        if ((err as { code?: string }).code === '2200H' || /reached maximum value of sequence/i.test(String((err as Error).message))) {
          throw new IdleaseError('EXHAUSTED', `The ticket sequence ${seq} reached its maximum (2^63-1); it never wraps. Move this sequence to a fresh range or retire the server.`, { cause: err });
        }
        throw err;
      }
      const row = rowsOf(flavor, res)[0];
      return row ? toBigInt(row.id, 'nextval') : undefined;
    },
    setPair() {},
    readScheme: () => readScheme(knex, flavor, ref),
    async facts() {
      const scheme = await readScheme(knex, flavor, ref);
      const res = await knex.raw(`SELECT last_value, is_called FROM ${seq}`);
      const row = rowsOf(flavor, res)[0]!;
      const called = row.is_called === true || row.is_called === 't';
      return { scheme, engine: 'sequence', lastId: called ? toBigInt(row.last_value, 'last_value') : undefined };
    },
    async probe() {
      await knex.raw('SELECT 1');
    },
    async checkServer() {
      // A sequence carries its own INCREMENT BY: no server setting overrides it.
    },
    async close() {},
  };
}

// ---------------------------------------------------------------- reshard steps

/**
 * Fence: bump the generation and close the scheme, waiting for every draw in flight.
 * After this returns no allocator can draw from this server until `openScheme`.
 */
export async function fenceScheme(knex: Knex, flavor: Flavor, ref: TicketRef): Promise<TicketScheme> {
  const schemes = schemeTable(flavor, ref.schema);
  return knex.transaction(async (trx) => {
    try {
      return await fenceIn(trx);
    } catch (err) {
      throw isMissingTable(err) ? await notMigrated(knex, flavor, ref, err) : err;
    }
  });

  async function fenceIn(trx: Knex.Transaction): Promise<TicketScheme> {
    // Postgres: draws hold ACCESS SHARE on the scheme table until they end; this waits for
    // them and holds new ones until commit. MySQL: the draw's INSERT … SELECT holds a shared
    // lock on the scheme row, which this UPDATE waits for.
    if (flavor !== 'mysql') await trx.raw(`LOCK TABLE ${schemes} IN ACCESS EXCLUSIVE MODE`);
    const res = await trx.raw(
      `UPDATE ${schemes} SET generation = generation + 1, is_open = ${flavor === 'mysql' ? '0' : 'false'} WHERE sequence_name = ?`,
      [ref.sequence],
    );
    const changed = affectedRows(flavor, res);
    if (changed !== 1) throw await notMigrated(knex, flavor, ref, undefined);
    return readScheme(trx, flavor, ref);
  }
}

/** The highest ticket this server has ever issued (0 if none). Call after fencing. */
export async function highestIssued(knex: Knex, flavor: Flavor, ref: TicketRef): Promise<bigint> {
  const obj = ownObject(flavor, ref.schema, ticketObjectName(ref.sequence));
  if (flavor === 'mysql') {
    // The counter, not just MAX(id): a draw that rolled back still used its value, and
    // the counter is the floor the server will continue from anyway.
    const res = await knex.raw(
      `SELECT (SELECT COALESCE(MAX(id), 0) FROM ${obj}) AS max_id,
              (SELECT COALESCE(AUTO_INCREMENT, 1) - 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?) AS counter`,
      [ticketObjectName(ref.sequence)],
    );
    const row = rowsOf(flavor, res)[0]!;
    const a = toBigInt(row.max_id, 'max id');
    const b = row.counter == null ? 0n : toBigInt(row.counter, 'auto_increment');
    return a > b ? a : b;
  }
  const res = await knex.raw(`SELECT last_value, is_called FROM ${obj}`);
  const row = rowsOf(flavor, res)[0]!;
  const called = row.is_called === true || row.is_called === 't';
  return called ? toBigInt(row.last_value, 'last_value') : 0n;
}

/**
 * Move this server's counter so its next ID is `first` (≡ offset mod increment, above the
 * global maximum), record the new pair, and open the scheme under a new generation.
 */
export async function openScheme(
  knex: Knex,
  flavor: Flavor,
  ref: TicketRef,
  next: { increment: number; offset: number; first: bigint },
): Promise<TicketScheme> {
  const obj = ownObject(flavor, ref.schema, ticketObjectName(ref.sequence));
  const schemes = schemeTable(flavor, ref.schema);
  if (flavor === 'mysql') {
    // MySQL hands out the smallest value ≥ AUTO_INCREMENT that is ≡ offset (mod increment)
    // of the session, so setting the counter to `first` is enough. Not transactional (DDL):
    // the scheme stays closed until the UPDATE below, so nobody draws in between.
    await knex.raw(`ALTER TABLE ${obj} AUTO_INCREMENT = ${intLiteral(next.first)}`);
    await knex.raw(`UPDATE ${schemes} SET generation = generation + 1, increment_by = ?, offset_by = ?, is_open = 1 WHERE sequence_name = ?`, [
      next.increment,
      next.offset,
      ref.sequence,
    ]);
  } else {
    await knex.transaction(async (trx) => {
      await trx.raw(`LOCK TABLE ${schemes} IN ACCESS EXCLUSIVE MODE`);
      await trx.raw(
        `ALTER SEQUENCE ${obj} INCREMENT BY ${intLiteral(next.increment)} START WITH ${intLiteral(next.first)} RESTART WITH ${intLiteral(next.first)}`,
      );
      await trx.raw(`UPDATE ${schemes} SET generation = generation + 1, increment_by = ?, offset_by = ?, is_open = true WHERE sequence_name = ?`, [
        next.increment,
        next.offset,
        ref.sequence,
      ]);
    });
  }
  return readScheme(knex, flavor, ref);
}

/**
 * MySQL errno / Postgres SQLSTATE for lock conflicts that a retry resolves. 1467
 * (ER_AUTOINC_READ_FAILED) is what InnoDB reports when the wait for its table-level
 * AUTO-INC lock (taken by INSERT … SELECT) ends in a deadlock or timeout; genuine counter
 * exhaustion also reports it, which the bounded retry then surfaces.
 */
export function isLockConflict(err: unknown): boolean {
  const e = err as { errno?: number; code?: string };
  return e?.errno === 1213 || e?.errno === 1205 || e?.errno === 1467 || e?.code === '40P01' || e?.code === '55P03' || e?.code === '40001';
}

/** Errors that are about the configuration, not the server's health: retrying elsewhere is right, probing is pointless. */
export function isMissingTicketObjects(err: unknown): boolean {
  return err instanceof IdleaseError && err.code === 'NOT_MIGRATED';
}

export { quoteIdent };
