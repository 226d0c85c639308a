/**
 * All ticket SQL: the Flickr tickets tables (MySQL/MariaDB), the sequences (Postgres), the
 * scheme table that fences resharding, and the one-statement draw on each. Every statement runs
 * on a SqlExecutor: knex, an app's pool, or one of idlease's own MySQL sessions.
 *
 * The scheme table holds, per sequence, the (increment, offset) this server is meant to
 * serve and a generation number. Every draw names the generation it believes in, inside
 * the same statement, so `reshard` can fence out allocators that still hold the old
 * scheme: their draw inserts nothing and they learn it from the same OK packet.
 *
 * int8 values go out as decimal strings cast in SQL and come back cast to text, so no type
 * parser on an app's pool (pg's setTypeParser(20, parseInt), a default mysql2 pool) rounds them.
 */
import { isMissingColumn, isMissingTable } from './driver-errors.js';
import {
  asText,
  bigParam,
  booleanLiteral,
  currentSchemaExpr,
  insertIgnore,
  intLiteral,
  isTrue,
  now,
  perDialect,
  type PerDialect,
} from './flavor.js';
import { executorCatalogQuery, notMigratedError, olderInstallSchema, olderTableError, relationExists } from './missing-object.js';
import { type Flavor, isPostgres, namedSchema, ownObject, ownObjectName, ownSchema } from './detect.js';
import type { SqlExecutor, SqlResult } from './sql.js';
import { IdleaseError } from '../errors.js';
import { toBigInt } from '../ids.js';
import { instanceHops, leaseInstanceExpression } from './instance.js';
import { DEFAULT_FAILOVER_GAP } from '../failover-gap.js';

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
  /**
   * The database instance the counter was last drawn on (null: never marked), and the one this read
   * ran on. When they differ the server was failed over (or restored) and its counter may be behind
   * tickets the old primary issued: draws are refused until fenceFailover has jumped it.
   */
  readonly instance?: string | null;
  readonly here?: string;
  /** How far fenceFailover jumps the counter past the highest ticket it finds. */
  readonly failoverGap?: bigint;
  readonly jumps?: number;
}

/** The pair a server serves: IDs ≡ offset (mod increment). */
export interface TicketPair {
  readonly increment: number;
  readonly offset: number;
}

/** The failover fence of each counter, beside its scheme (see TicketScheme.instance). */
const SCHEME_FENCING_COLUMNS: PerDialect<readonly string[]> = {
  mysql: [
    'instance varchar(255) NULL',
    `failover_gap bigint NOT NULL DEFAULT ${DEFAULT_FAILOVER_GAP}`,
    'jumps int NOT NULL DEFAULT 0',
    'jumped_at timestamp(3) NULL',
  ],
  postgres: [
    'instance varchar(255)',
    `failover_gap bigint NOT NULL DEFAULT ${DEFAULT_FAILOVER_GAP}`,
    'jumps integer NOT NULL DEFAULT 0',
    'jumped_at timestamptz',
  ],
};

/**
 * Version 2 of the scheme table, for servers migrated before the failover fence: add its columns
 * and mark this sequence's counter with the instance the migration runs on (what the earlier
 * version trusted; an unmarked counter would jump once, which is safe too).
 */
export async function upgradeSchemeFencing(db: SqlExecutor, ref: TicketRef): Promise<void> {
  const schemes = schemeTable(db.flavor, ref.schema);
  for (const c of perDialect(db.flavor, SCHEME_FENCING_COLUMNS)) await db.run(`ALTER TABLE ${schemes} ADD COLUMN IF NOT EXISTS ${c}`, []);
  await db.run(`UPDATE ${schemes} SET instance = ? WHERE sequence_name = ? AND instance IS NULL`, [
    await currentInstance(db),
    ref.sequence,
  ]);
}

/** The instance a statement on `db` runs on (instance.ts), read as a value. */
async function currentInstance(db: SqlExecutor): Promise<string> {
  const row = (await db.run(`SELECT ${leaseInstanceExpression(db.flavor)} AS here`, [])).rows[0];
  return String(row?.[0]);
}

/** Table (MySQL) or sequence (Postgres) name for a sequence name. */
export function ticketObjectName(sequence: string): string {
  return TICKET_TABLE_PREFIX + sequence;
}

function ticketObject(flavor: Flavor, ref: TicketRef): string {
  return ownObject(flavor, ref.schema, ticketObjectName(ref.sequence));
}

function schemeTable(flavor: Flavor, schema: string | undefined): string {
  return ownObject(flavor, schema, SCHEME_TABLE);
}

export function ticketsDdl(
  flavor: Flavor,
  ref: TicketRef,
  opts: { engine: TicketEngine; increment: number; offset: number; failoverGap?: bigint },
): { up: string[]; down: string[]; seed: (db: SqlExecutor) => Promise<void>; unseed: (db: SqlExecutor) => Promise<void> } {
  const obj = ticketObject(flavor, ref);
  const schemes = schemeTable(flavor, ref.schema);
  const seed = async (db: SqlExecutor): Promise<void> => {
    // Insert-if-missing: re-running a migration must not reset a resharded scheme. A new counter
    // starts its history on this instance. The instance is read first and written as a value, so
    // statement-based replication copies the primary's, not each replica's own.
    const here = await currentInstance(db);
    const gap = (opts.failoverGap ?? DEFAULT_FAILOVER_GAP).toString();
    const sql = insertIgnore(
      flavor,
      `${schemes} (sequence_name, generation, increment_by, offset_by, is_open, instance, failover_gap)`,
      `VALUES (?, 1, ?, ?, ${booleanLiteral(flavor, true)}, ?, ${bigParam(flavor)})`,
      'sequence_name',
    );
    await db.run(sql, [ref.sequence, opts.increment, opts.offset, here, gap]);
  };
  // Down removes what up created: the scheme table goes with its last row (other ticket
  // sequences in the same schema keep it while they exist).
  const unseed = async (db: SqlExecutor): Promise<void> => {
    await db.run(`DELETE FROM ${schemes} WHERE sequence_name = ?`, [ref.sequence]);
    const left = (await db.run(`SELECT COUNT(*) AS n FROM ${schemes}`, [])).rows[0];
    if (Number(left?.[0] ?? 0) === 0) await db.run(`DROP TABLE IF EXISTS ${schemes}`, []);
  };
  return { ...perDialect(flavor, COUNTERS).ddl(obj, schemes, opts), seed, unseed };
}

/** The ticket objects of `ref` are missing on this server: NOT_MIGRATED naming the migrate that installs them. */
async function notMigrated(db: SqlExecutor, ref: TicketRef, cause: unknown): Promise<IdleaseError> {
  const flavor = db.flavor;
  const explicitSchema = namedSchema(flavor, ref.schema) !== undefined;
  const schema = ownSchema(flavor, ref.schema);
  const where = namedSchema(flavor, schema);
  if (isMissingColumn(cause)) {
    return olderTableError({
      table: ownObjectName(flavor, ref.schema, SCHEME_TABLE),
      call: `migrate(knex, { ${explicitSchema ? `schema: '${ref.schema}', ` : ''}tickets: { sequences: ['${ref.sequence}'] } })`,
      flags: `${explicitSchema ? `--schema ${ref.schema} ` : ''}--no-segments --tickets ${ref.sequence}`,
      cause,
    });
  }
  return notMigratedError({
    what: `The ticket objects for sequence "${ref.sequence}" are missing on this server${where === undefined ? '' : ` (schema ${where})`}.`,
    call: `migrate(knex, { ${explicitSchema ? `schema: '${ref.schema}', ` : ''}tickets: { sequences: ['${ref.sequence}'] } })`,
    flags: `${explicitSchema ? `--schema ${ref.schema} ` : ''}--no-segments --tickets ${ref.sequence}`,
    olderIn: await olderInstallSchema(executorCatalogQuery(db), isPostgres(flavor), ref.schema !== undefined, schema ?? '', SCHEME_TABLE),
    ownSchema: schema,
    cause,
  });
}

/** A PostgreSQL sequence's last value, once it was called. */
async function sequenceLastValue(db: SqlExecutor, seq: string): Promise<bigint | undefined> {
  const row = (await db.run(`SELECT ${asText('postgres', 'last_value')} AS last_value, is_called FROM ${seq}`, [])).rows[0];
  return row && isTrue(row[1]) ? toBigInt(row[0], 'last_value') : undefined;
}

async function mysqlMaxId(db: SqlExecutor, table: string): Promise<bigint | undefined> {
  const last = (await db.run(`SELECT ${asText('mysql', 'MAX(id)')} AS last FROM ${table}`, [])).rows[0]?.[0];
  return last == null ? undefined : toBigInt(last, 'last id');
}

/**
 * The last ticket this server's counter issued (MySQL: the tickets table's id; PostgreSQL: the
 * sequence's last_value once called); undefined when none was, or the object is missing.
 */
export async function lastIssuedTicket(db: SqlExecutor, ref: TicketRef): Promise<bigint | undefined> {
  const obj = ticketObject(db.flavor, ref);
  if (!(await relationExists(executorCatalogQuery(db), isPostgres(db.flavor), obj))) return undefined;
  try {
    return await perDialect(db.flavor, COUNTERS).last(db, obj);
  } catch (err) {
    if (isMissingTable(err)) return undefined;
    throw err;
  }
}

export async function readScheme(db: SqlExecutor, ref: TicketRef, forUpdate = false): Promise<TicketScheme> {
  const flavor = db.flavor;
  let res: SqlResult;
  try {
    res = await db.run(
      `SELECT ${asText(flavor, 'generation')} AS generation, increment_by, offset_by, is_open, instance, ${leaseInstanceExpression(flavor)} AS here, ` +
        `${asText(flavor, 'failover_gap')} AS failover_gap, jumps FROM ${schemeTable(flavor, ref.schema)} WHERE sequence_name = ?${forUpdate ? ' FOR UPDATE' : ''}`,
      [ref.sequence],
    );
  } catch (err) {
    if (isMissingTable(err) || isMissingColumn(err)) throw await notMigrated(db, ref, err);
    throw err;
  }
  const row = res.rows[0];
  if (!row) throw await notMigrated(db, ref, undefined);
  return {
    generation: toBigInt(row[0], 'generation'),
    increment: Number(row[1]),
    offset: Number(row[2]),
    open: isTrue(row[3]),
    instance: row[4] == null ? null : String(row[4]),
    here: String(row[5]),
    failoverGap: toBigInt(row[6], 'failover_gap'),
    jumps: Number(row[7]),
  };
}

/** Whether draws on this server are refused until fenceFailover runs (see TicketScheme.instance). */
export const needsFailoverFence = (scheme: TicketScheme): boolean => scheme.here !== undefined && scheme.instance !== scheme.here;

/**
 * The smallest value ≥ the next-but-one multiple of `gap` above `highest` that is ≡ offset (mod
 * increment): a jump of at least the gap that keeps the server's residue, round for a person reading IDs.
 * `hops` more than one (PostgreSQL timelines passed since the row's instance: instanceHops) puts it
 * that many gaps further, past a jump an earlier promotion made and this copy never received.
 */
export function failoverTarget(highest: bigint, gap: bigint, pair: TicketPair, hops = 1): bigint {
  const base = (highest / gap + 1n + BigInt(hops)) * gap;
  const inc = BigInt(pair.increment);
  const off = BigInt(pair.offset) % inc;
  return base + ((off - (base % inc) + inc) % inc);
}

/**
 * The fence after a failover, run by the first allocator whose draw lands on a new instance (the
 * draw itself refuses: see the draw statements): under the scheme row's lock, which holds every
 * draw out, move the counter past everything it may have issued before on the old primary — the
 * highest ticket this copy knows plus the failover gap, keeping the residue — and mark the new
 * instance. Whoever comes second finds it marked and does nothing. Returns whether this call jumped.
 */
export async function fenceFailover(db: SqlExecutor, ref: TicketRef): Promise<boolean> {
  const flavor = db.flavor;
  const obj = ticketObject(flavor, ref);
  const schemes = schemeTable(flavor, ref.schema);
  try {
    return await db.transaction(async (tx) => {
      const counter = perDialect(flavor, COUNTERS);
      // Where draws are held by the table's lock it is taken here; else the row's, read FOR UPDATE.
      const scheme = await readScheme(tx, ref, !(await counter.holdDraws(tx, schemes)));
      if (!needsFailoverFence(scheme)) return false;
      const target = failoverTarget(
        await highestIssued(tx, ref),
        scheme.failoverGap ?? DEFAULT_FAILOVER_GAP,
        scheme,
        instanceHops(scheme.instance ?? null, scheme.here!),
      );
      await counter.jumpTo(tx, obj, target);
      await tx.run(`UPDATE ${schemes} SET instance = ?, jumps = jumps + 1, jumped_at = ${now(flavor)} WHERE sequence_name = ?`, [
        scheme.here!,
        ref.sequence,
      ]);
      return true;
    });
  } catch (err) {
    throw isMissingTable(err) ? await notMigrated(db, ref, err) : err;
  }
}

/**
 * A Galera node with wsrep_auto_increment_control=ON (the default) sets
 * auto_increment_increment/offset from the cluster size, over idlease's session pair, and
 * rewrites the pair of connections already open when a node leaves or joins (seen: 2/1 and
 * 2/2 instead of 3/1 and 3/3). The residue check then refuses those IDs and the server
 * flaps between refused and up. SHOW VARIABLES, not @@wsrep_on: MySQL has no such variable.
 */
export async function galeraPairProblem(db: SqlExecutor, name: string): Promise<IdleaseError | undefined> {
  const res = await db.run("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_auto_increment_control')", []);
  const vars = new Map(res.rows.map((r) => [String(r[0]).toLowerCase(), String(r[1]).toUpperCase()]));
  if (vars.get('wsrep_on') !== 'ON' || vars.get('wsrep_auto_increment_control') !== 'ON') return undefined;
  return new IdleaseError(
    'BAD_CONFIG',
    `${name} is a Galera node with wsrep_auto_increment_control=ON: Galera then sets auto_increment_increment/offset from the cluster size, ` +
      "over the ticket allocator's pair, and changes them on open connections when a node leaves or joins. " +
      'Turn it off on every node (SET GLOBAL wsrep_auto_increment_control = OFF, and wsrep_auto_increment_control = OFF in my.cnf), ' +
      'and give each node its own database for the ticket tables (docs/failover.md, Galera).',
  );
}

/** One round trip: is the server there at all. */
export async function pingTicketServer(db: SqlExecutor): Promise<void> {
  await db.run('SELECT 1', []);
}

/**
 * MySQL: the pair on the session the draw runs on, so my.cnf does not matter. The lock-wait
 * bound sits below the allocator's statement bound, so a row lock held elsewhere ends as a
 * retryable 1205 instead of looking like a dead server.
 */
export async function setTicketSession(db: SqlExecutor, pair: TicketPair, lockWaitTimeoutS: number): Promise<void> {
  await db.run('SET SESSION auto_increment_increment = ?, auto_increment_offset = ?, innodb_lock_wait_timeout = ?', [
    pair.increment,
    pair.offset,
    lockWaitTimeoutS,
  ]);
}

/**
 * The draw. LOCK IN SHARE MODE makes the scheme row's shared lock explicit: under
 * REPEATABLE READ InnoDB takes it for INSERT … SELECT anyway, but under READ COMMITTED
 * the read would be a snapshot and a reshard's fence would not wait for the draw.
 * Values: the sequence name and the generation as a decimal string.
 */
export function mysqlDrawSql(ref: TicketRef): string {
  const table = ticketObject('mysql', ref);
  return `REPLACE INTO ${table} (stub) SELECT 'a' FROM ${schemeTable('mysql', ref.schema)} WHERE sequence_name = ? AND generation = ${bigParam('mysql')} AND is_open = 1 AND instance = ${leaseInstanceExpression('mysql')} LOCK IN SHARE MODE`;
}

/**
 * Postgres: `nextval` on a sequence whose INCREMENT BY/START WITH is the pair. The scheme row
 * is read in the same statement, so a reshard that took its ACCESS EXCLUSIVE lock on the scheme
 * table fences every draw that starts after it. The regclass literal is a validated, quoted
 * identifier: never user text.
 */
function postgresDrawSql(flavor: Flavor, ref: TicketRef): string {
  return `SELECT nextval('${ticketObject(flavor, ref)}')::text AS id FROM ${schemeTable(flavor, ref.schema)} WHERE sequence_name = ? AND generation = ${bigParam(flavor)} AND is_open AND instance = ${leaseInstanceExpression(flavor)}`;
}

/** MySQL: the new id in the OK packet; no row inserted means the scheme moved on. */
const mysqlDrawn = (res: SqlResult): bigint | undefined => (res.affected === 0 ? undefined : toBigInt(res.insertId, 'insertId'));
const postgresDrawn = (res: SqlResult): bigint | undefined => (res.rows[0] ? toBigInt(res.rows[0][0], 'nextval') : undefined);

/**
 * The draw on one server, its text built once: the new ID, or undefined when the server's
 * scheme is no longer `generation` (fenced by a reshard). On MySQL `db` must be a session that
 * carries the pair (setTicketSession). Missing objects → NOT_MIGRATED; a PostgreSQL sequence
 * at its maximum → EXHAUSTED; other driver errors pass through for the caller's retry policy.
 */
export function ticketDraw(flavor: Flavor, ref: TicketRef): (db: SqlExecutor, generation: bigint) => Promise<bigint | undefined> {
  const counter = perDialect(flavor, COUNTERS);
  const text = counter.drawSql(flavor, ref);
  const drawn = counter.drawn;
  const failed = async (db: SqlExecutor, err: unknown): Promise<never> => {
    if (isMissingTable(err) || isMissingColumn(err)) throw await notMigrated(db, ref, err);
    if ((err as { code?: string }).code === '2200H' || /reached maximum value of sequence/i.test(String((err as Error).message))) {
      throw new IdleaseError(
        'EXHAUSTED',
        `The ticket sequence ${ticketObject(flavor, ref)} reached its maximum (2^63-1); it never wraps. Move this sequence to a fresh range or retire the server.`,
        { cause: err },
      );
    }
    throw err;
  };
  return (db, generation) => db.run(text, [ref.sequence, generation.toString()]).then(drawn, (err: unknown) => failed(db, err));
}

/** What the server's counter says, beside the scheme: for status(). */
export interface TicketCounterFacts {
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

/** On MySQL `db` is a ticket session, so that the session pair shown is the one draws run under. */
export async function ticketCounterFacts(db: SqlExecutor, ref: TicketRef): Promise<TicketCounterFacts> {
  const obj = ticketObject(db.flavor, ref);
  return perDialect(db.flavor, COUNTERS).facts(db, ref, obj);
}

async function mysqlCounterFacts(db: SqlExecutor, ref: TicketRef, obj: string): Promise<TicketCounterFacts> {
  const vars = (
    await db.run(
      'SELECT @@session.auto_increment_increment, @@session.auto_increment_offset, @@global.auto_increment_increment, @@global.auto_increment_offset',
      [],
    )
  ).rows[0];
  const engine = (
    await db.run(`SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ${currentSchemaExpr('mysql')} AND TABLE_NAME = ?`, [
      ticketObjectName(ref.sequence),
    ])
  ).rows[0]?.[0];
  return {
    sessionIncrement: Number(vars?.[0]),
    sessionOffset: Number(vars?.[1]),
    globalIncrement: Number(vars?.[2]),
    globalOffset: Number(vars?.[3]),
    engine: String(engine ?? 'unknown'),
    lastId: await mysqlMaxId(db, obj),
  };
}

// Reshard steps, on the app's own handle: none of them depends on session state.

/**
 * Fence: bump the generation and close the scheme, waiting for every draw in flight.
 * After this returns no allocator can draw from this server until `openScheme`.
 */
export async function fenceScheme(db: SqlExecutor, ref: TicketRef): Promise<TicketScheme> {
  const flavor = db.flavor;
  const schemes = schemeTable(flavor, ref.schema);
  let fenced: TicketScheme | undefined;
  try {
    fenced = await db.transaction(async (tx) => {
      // Postgres: draws hold ACCESS SHARE on the scheme table until they end; this waits for
      // them and holds new ones until commit. MySQL: the draw's INSERT … SELECT holds a shared
      // lock on the scheme row, which this UPDATE waits for.
      await perDialect(flavor, COUNTERS).holdDraws(tx, schemes);
      const res = await tx.run(
        `UPDATE ${schemes} SET generation = generation + 1, is_open = ${booleanLiteral(flavor, false)} WHERE sequence_name = ?`,
        [ref.sequence],
      );
      return res.affected === 1 ? readScheme(tx, ref) : undefined;
    });
  } catch (err) {
    // Named outside the transaction: on a single connection (PGlite) the catalog read would wait for it.
    throw isMissingTable(err) ? await notMigrated(db, ref, err) : err;
  }
  if (!fenced) throw await notMigrated(db, ref, undefined);
  return fenced;
}

/** The highest ticket this server has ever issued (0 if none). Call after fencing. */
export async function highestIssued(db: SqlExecutor, ref: TicketRef): Promise<bigint> {
  const obj = ticketObject(db.flavor, ref);
  return perDialect(db.flavor, COUNTERS).highest(db, ref, obj);
}

async function mysqlHighestIssued(db: SqlExecutor, ref: TicketRef, obj: string): Promise<bigint> {
  // The counter, not just MAX(id): a draw that rolled back still used its value, and
  // the counter is the floor the server will continue from anyway.
  const row = (
    await db.run(
      `SELECT (SELECT ${asText('mysql', 'COALESCE(MAX(id), 0)')} FROM ${obj}) AS max_id,
            (SELECT ${asText('mysql', 'COALESCE(AUTO_INCREMENT, 1) - 1')} FROM information_schema.TABLES WHERE TABLE_SCHEMA = ${currentSchemaExpr('mysql')} AND TABLE_NAME = ?) AS counter`,
      [ticketObjectName(ref.sequence)],
    )
  ).rows[0]!;
  const max = toBigInt(row[0], 'max id');
  const counter = row[1] == null ? 0n : toBigInt(row[1], 'auto_increment');
  return max > counter ? max : counter;
}

/**
 * Move this server's counter so its next ID is `first` (≡ offset mod increment, above the
 * global maximum), record the new pair, and open the scheme under a new generation.
 */
export async function openScheme(db: SqlExecutor, ref: TicketRef, next: TicketPair & { first: bigint }): Promise<TicketScheme> {
  const flavor = db.flavor;
  const obj = ticketObject(flavor, ref);
  const schemes = schemeTable(flavor, ref.schema);
  // The counter was just moved on this instance: its history is complete here.
  const reopen = `UPDATE ${schemes} SET generation = generation + 1, increment_by = ?, offset_by = ?, is_open = ${booleanLiteral(flavor, true)}, instance = ? WHERE sequence_name = ?`;
  const values = [next.increment, next.offset, await currentInstance(db), ref.sequence];
  await perDialect(flavor, COUNTERS).restart(db, { obj, schemes, next }, async (on) => {
    await on.run(reopen, values);
  });
  return readScheme(db, ref);
}

/**
 * The counter behind a sequence's tickets, per dialect as a whole: an AUTO_INCREMENT table on
 * MySQL (the session's auto_increment_increment/offset give the pair, setTicketSession), a
 * SEQUENCE on PostgreSQL (its INCREMENT BY/START WITH are the pair). `obj` is the counter's
 * quoted name, `schemes` the scheme table's.
 */
interface TicketCounter {
  /** The scheme table and the counter (the seed and unseed are shared). */
  ddl(obj: string, schemes: string, opts: { engine: TicketEngine; increment: number; offset: number }): { up: string[]; down: string[] };
  /** The draw's text (values: the sequence name, the generation as a decimal string) and its reading. */
  drawSql(flavor: Flavor, ref: TicketRef): string;
  drawn(res: SqlResult): bigint | undefined;
  /** The last ticket issued; undefined when none was. */
  last(db: SqlExecutor, obj: string): Promise<bigint | undefined>;
  /** The floor the counter continues from (0 if none). */
  highest(db: SqlExecutor, ref: TicketRef, obj: string): Promise<bigint>;
  facts(db: SqlExecutor, ref: TicketRef, obj: string): Promise<TicketCounterFacts>;
  /**
   * Hold every draw out until `tx` ends, where draws are held by a table lock, and say so.
   * PostgreSQL: draws hold ACCESS SHARE on the scheme table, so ACCESS EXCLUSIVE waits for them
   * and holds new ones. MySQL: nothing here (false): the draw's INSERT … SELECT holds a shared
   * lock on the scheme row, which a write to the row, or a read FOR UPDATE, waits for.
   */
  holdDraws(tx: SqlExecutor, schemes: string): Promise<boolean>;
  /** Move the counter so that the next draw is the first value above `target` with the residue. */
  jumpTo(tx: SqlExecutor, obj: string, target: bigint): Promise<void>;
  /** Restart the counter at `next.first` with the new increment, then `reopen` the scheme. */
  restart(
    db: SqlExecutor,
    where: { obj: string; schemes: string; next: TicketPair & { first: bigint } },
    reopen: (on: SqlExecutor) => Promise<void>,
  ): Promise<void>;
}

const COUNTERS: PerDialect<TicketCounter> = {
  mysql: {
    ddl: (obj, schemes, opts) => ({
      up: [
        `CREATE TABLE IF NOT EXISTS ${schemes} (
  sequence_name varchar(64) NOT NULL PRIMARY KEY,
  generation bigint NOT NULL,
  increment_by int NOT NULL,
  offset_by int NOT NULL,
  is_open tinyint NOT NULL,
  ${SCHEME_FENCING_COLUMNS.mysql.join(',\n  ')}
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
        `CREATE TABLE IF NOT EXISTS ${obj} (
  id bigint unsigned NOT NULL AUTO_INCREMENT,
  stub char(1) NOT NULL DEFAULT '',
  PRIMARY KEY (id),
  UNIQUE KEY stub (stub)
) ENGINE=${opts.engine}`,
      ],
      down: [`DROP TABLE IF EXISTS ${obj}`],
    }),
    drawSql: (_flavor, ref) => mysqlDrawSql(ref),
    drawn: mysqlDrawn,
    last: mysqlMaxId,
    highest: mysqlHighestIssued,
    facts: mysqlCounterFacts,
    holdDraws: () => Promise.resolve(false),
    // A row with an explicit id moves the AUTO_INCREMENT counter past it (InnoDB and MyISAM
    // alike), and the next draw takes the first value above it with the residue: target + increment.
    jumpTo: async (tx, obj, target) => {
      await tx.run(`REPLACE INTO ${obj} (id, stub) VALUES (${bigParam('mysql')}, 'a')`, [target.toString()]);
    },
    // MySQL hands out the smallest value ≥ AUTO_INCREMENT that is ≡ offset (mod increment) of the
    // session, so setting the counter to `first` is enough. Not transactional (DDL): the scheme
    // stays closed until `reopen`, so nobody draws in between.
    restart: async (db, { obj, next }, reopen) => {
      await db.run(`ALTER TABLE ${obj} AUTO_INCREMENT = ${intLiteral(next.first)}`, []);
      await reopen(db);
    },
  },
  postgres: {
    ddl: (obj, schemes, opts) => ({
      up: [
        `CREATE TABLE IF NOT EXISTS ${schemes} (
  sequence_name varchar(64) PRIMARY KEY,
  generation bigint NOT NULL,
  increment_by integer NOT NULL,
  offset_by integer NOT NULL,
  is_open boolean NOT NULL,
  ${SCHEME_FENCING_COLUMNS.postgres.join(',\n  ')}
)`,
        `CREATE SEQUENCE IF NOT EXISTS ${obj} AS bigint INCREMENT BY ${intLiteral(opts.increment)} MINVALUE 1 START WITH ${intLiteral(opts.offset)} NO CYCLE`,
      ],
      down: [`DROP SEQUENCE IF EXISTS ${obj}`],
    }),
    drawSql: postgresDrawSql,
    drawn: postgresDrawn,
    last: sequenceLastValue,
    // A sequence not called since a RESTART (a reshard, a reshard's rollback) reads last_value =
    // its next value and is_called = false: what it issued before lies below that, not at 0. Read
    // as 0, a second reshard before any draw started the set again from its offsets.
    highest: async (db, _ref, obj) => {
      const row = (await db.run(`SELECT ${asText('postgres', 'last_value')} AS last_value, is_called FROM ${obj}`, [])).rows[0];
      if (!row) return 0n;
      const last = toBigInt(row[0], 'last_value');
      return isTrue(row[1]) ? last : last - 1n;
    },
    facts: async (db, _ref, obj) => ({ engine: 'sequence', lastId: await sequenceLastValue(db, obj) }),
    holdDraws: async (tx, schemes) => {
      await tx.run(`LOCK TABLE ${schemes} IN ACCESS EXCLUSIVE MODE`, []);
      return true;
    },
    jumpTo: async (tx, obj, target) => {
      await tx.run(`SELECT setval('${obj}', ${bigParam('postgres')}, true)`, [target.toString()]);
    },
    restart: (db, { obj, schemes, next }, reopen) =>
      db.transaction(async (tx) => {
        await COUNTERS.postgres.holdDraws(tx, schemes);
        const first = intLiteral(next.first);
        await tx.run(`ALTER SEQUENCE ${obj} INCREMENT BY ${intLiteral(next.increment)} START WITH ${first} RESTART WITH ${first}`, []);
        await reopen(tx);
      }),
  },
};
