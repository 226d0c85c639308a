/**
 * All SQL for next_id() on MariaDB: IDs filled in by the server, with no function call.
 *
 * MariaDB refuses a stored function in a column DEFAULT (ER 1901) but accepts an expression
 * that reads a SEQUENCE. So the counter is a SEQUENCE whose value is
 * v = (ms since epoch << sequenceBits) | n — the same counter as PostgreSQL's — and `attach`
 * writes the composition itself as the column's DEFAULT:
 *
 *   NEXT VALUE FOR seq + (PREVIOUS VALUE FOR seq >> S) * (2^(shardBits+S) − 2^S) + (shard << S)
 *     + (@@server_id <> home) * (gap << (shardBits + S))
 *
 * i.e. v with the shard slotted in between its time and sequence parts (PREVIOUS VALUE is the v
 * that NEXT VALUE just drew: MariaDB evaluates the two left to right within one row — observed,
 * not documented, and checked by the tests that count duplicates). Uniqueness rests on one fact,
 * as on PostgreSQL: the sequence never moves backwards. A burst of more than 2^S IDs in a
 * millisecond counts on into the next milliseconds' space; MAXVALUE with NOCYCLE makes the end of
 * the time field an error (4084 "has run out"), never a wrap or a negative ID.
 *
 * Nothing in an insert can move a sequence up to the clock (no dynamic SQL in a DEFAULT or a
 * trigger; SETVAL takes only a literal), so an EVENT does: every 5 ms it runs
 * `SETVAL(seq, clock << S)` through EXECUTE IMMEDIATE. SETVAL never moves a sequence back, so
 * the ticker cannot break uniqueness, only freshness; without the event scheduler the time field
 * would stop, hence `event_scheduler = ON` is checked at install and attach.
 *
 * The failover fence lives in the DEFAULT: `home` is the @@server_id where attach last ran.
 * On any other server — a promoted replica, whose copy of the sequence may trail what the old
 * primary handed out during the replication lag — every ID carries a time field `gap` ms further
 * on, so the new primary's IDs start past anything the old one can have issued, with no step by
 * anyone (invariant 8). Its cost is one comparison per row. An async replica lags by less than
 * the gap or the fence does not hold: docs/next-id.md says so. Rerunning attach on the new
 * primary makes it home (after jumping the sequence past the fenced IDs) and enables its ticker
 * (events arrive on a replica SLAVESIDE_DISABLED).
 */
import { resolveLayout, type IdLayout } from '../layout/index.js';
import { IdleaseError } from '../errors.js';
import { toBigInt } from '../ids.js';
import { asText, clockMs, currentSchemaExpr, intLiteral, quoteIdent, stringLiteral } from './flavor.js';
import type { SqlExecutor } from './sql.js';

export const MYSQL_NEXT_ID_TABLE = 'idlease_next_id';
export const MYSQL_NEXT_ID_SEQUENCE = 'idlease_next_id_seq';
export const MYSQL_NEXT_ID_EVENT = 'idlease_next_id_tick';
/** How far (ms) IDs made on a server other than home run ahead: the largest replication lag a failover may lose. */
export const MYSQL_NEXT_ID_FAILOVER_GAP_MS = 60_000;
/** Values the server keeps in memory per refill; a crash skips the rest (never reuses them). */
const CACHE = 1000;
/** The ticker's period, in ms, and runs of its 1-second loop. */
const TICK_MS = 5;

const f = 'mysql' as const;
const q = (name: string) => quoteIdent(f, name);

export interface MysqlNextIdInstall {
  readonly shard: number;
  readonly layout: IdLayout;
  readonly gapMs: number;
}

export interface MysqlNextIdState extends MysqlNextIdInstall {
  /** @@server_id of the server where attach (or the install) last ran: IDs made elsewhere are fenced. */
  readonly homeServerId: number;
}

/** The last counter the sequence may hand out: the time field's end, less the fence's gap. */
function maxCounter(layout: IdLayout, gapMs: number): bigint {
  const lastMs = (1n << BigInt(layout.timeBits)) - 1n;
  return ((lastMs + 1n - BigInt(gapMs)) << BigInt(layout.sequenceBits)) - 1n;
}

/** The clock as a counter (ms since the epoch << S), capped at the last counter: the ticker's target. */
function clockCounter(o: MysqlNextIdInstall): string {
  const S = BigInt(o.layout.sequenceBits);
  return `LEAST(${intLiteral(maxCounter(o.layout, o.gapMs))}, (CAST(FLOOR(${clockMs(f)}) AS SIGNED) - ${intLiteral(o.layout.epochMs)}) * ${intLiteral(1n << S)})`;
}

export function mysqlNextIdDdl(o: MysqlNextIdInstall): { up: string[]; down: string[] } {
  const { timeBits, shardBits, sequenceBits, epochMs } = o.layout;
  const tickLoop = Math.round(1000 / TICK_MS);
  return {
    up: [
      `CREATE TABLE IF NOT EXISTS ${q(MYSQL_NEXT_ID_TABLE)} (
  id TINYINT NOT NULL PRIMARY KEY,
  shard INT NOT NULL,
  time_bits INT NOT NULL,
  shard_bits INT NOT NULL,
  sequence_bits INT NOT NULL,
  epoch_ms BIGINT NOT NULL,
  failover_gap_ms BIGINT NOT NULL,
  home_server_id BIGINT NOT NULL
) ENGINE=InnoDB`,
      `INSERT IGNORE INTO ${q(MYSQL_NEXT_ID_TABLE)} VALUES (1, ${intLiteral(o.shard)}, ${intLiteral(timeBits)}, ${intLiteral(shardBits)}, ${intLiteral(sequenceBits)}, ${intLiteral(epochMs)}, ${intLiteral(o.gapMs)}, @@server_id)`,
      `CREATE SEQUENCE IF NOT EXISTS ${q(MYSQL_NEXT_ID_SEQUENCE)} START WITH 0 MINVALUE 0 MAXVALUE ${intLiteral(maxCounter(o.layout, o.gapMs))} INCREMENT BY 1 CACHE ${intLiteral(CACHE)} NOCYCLE`,
      // The ticker: a 1 s event looping every TICK_MS (the scheduler's own period is whole
      // seconds). Runs that overlap by a few ms are harmless: SETVAL only ever raises. It does
      // nothing on a read-only server (a demoted primary whose event is still enabled), so it
      // never writes there, and nothing on a server other than home: there every ID carries the
      // fence's gap, and moving the sequence up to the clock would make those IDs track the
      // clock a gap ahead, where the old home's own IDs arrive a gap later after a fail-back
      // (a failover manager that re-enables events, as MaxScale's handle_events does, would
      // otherwise start exactly that). Left alone, the fenced IDs stay near the time of the
      // failover plus the gap; `next-id attach` there makes the server home and the ticker runs.
      `CREATE EVENT IF NOT EXISTS ${q(MYSQL_NEXT_ID_EVENT)} ON SCHEDULE EVERY 1 SECOND ON COMPLETION PRESERVE ENABLE
COMMENT ${stringLiteral(f, `idlease next_id: moves ${MYSQL_NEXT_ID_SEQUENCE} up to the clock every ${TICK_MS} ms`)}
DO BEGIN
  DECLARE i INT DEFAULT 0;
  DECLARE home BIGINT DEFAULT NULL;
  SELECT home_server_id INTO home FROM ${q(MYSQL_NEXT_ID_TABLE)} WHERE id = 1;
  -- Ticks stay out of the binary log (a few hundred bytes each, 200 a second): a replica's
  -- copy of the sequence follows every draw anyway, through the refill that each draw after a
  -- tick writes. Without the privilege to do so the ticks are logged, which is only bigger.
  BEGIN
    DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
    SET SESSION sql_log_bin = 0;
  END;
  WHILE i < ${intLiteral(tickLoop)} AND @@GLOBAL.read_only = 0 AND @@server_id = home DO
    EXECUTE IMMEDIATE CONCAT('DO SETVAL(${q(MYSQL_NEXT_ID_SEQUENCE)}, ', ${clockCounter(o)}, ')');
    DO SLEEP(${(TICK_MS / 1000).toFixed(3)});
    SET i = i + 1;
  END WHILE;
END`,
    ],
    down: [
      `DROP EVENT IF EXISTS ${q(MYSQL_NEXT_ID_EVENT)}`,
      `DROP SEQUENCE IF EXISTS ${q(MYSQL_NEXT_ID_SEQUENCE)}`,
      `DROP TABLE IF EXISTS ${q(MYSQL_NEXT_ID_TABLE)}`,
    ],
  };
}

/** The column DEFAULT attach writes: the composition, and the fence for servers other than `home`. */
export function mysqlNextIdExpression(s: MysqlNextIdState): string {
  const S = BigInt(s.layout.sequenceBits);
  const shardShift = BigInt(s.layout.shardBits) + S;
  const seq = q(MYSQL_NEXT_ID_SEQUENCE);
  const stretch = (1n << shardShift) - (1n << S);
  const shardPart = BigInt(s.shard) << S;
  const fence = BigInt(s.gapMs) << shardShift;
  return `(NEXT VALUE FOR ${seq} + (PREVIOUS VALUE FOR ${seq} >> ${intLiteral(S)}) * ${intLiteral(stretch)} + ${intLiteral(shardPart)} + (@@server_id <> ${intLiteral(s.homeServerId)}) * ${intLiteral(fence)})`;
}

/**
 * What the design needs of the server, checked before anything is installed or attached so
 * that no insert is the first to find out. Each refusal names the setting and how to set it.
 */
export async function checkMysqlNextIdServer(db: SqlExecutor): Promise<void> {
  const res = await db.run('SELECT VERSION(), @@GLOBAL.event_scheduler, @@GLOBAL.binlog_format, @@GLOBAL.log_bin', []);
  const [version, scheduler, binlogFormat] = (res.rows[0] ?? []).map((v) => String(v));
  if (!/mariadb/i.test(version ?? '')) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `next_id() needs MariaDB 10.3 or later (a SEQUENCE in a column DEFAULT); this server is MySQL ${version}, which has neither. On MySQL use segments or tickets (docs/next-id.md, "MySQL 8").`,
    );
  }
  if (String(scheduler).toUpperCase() !== 'ON') {
    throw new IdleaseError(
      'BAD_CONFIG',
      `event_scheduler is ${scheduler}: next_id() on MariaDB needs event_scheduler = ON (an event keeps the IDs' time field on the clock). ` +
        `Set it: SET GLOBAL event_scheduler = ON, and event_scheduler = ON under [mysqld] in the server's config so a restart keeps it. Then rerun this command.`,
    );
  }
  if (String(binlogFormat).toUpperCase() === 'STATEMENT') {
    throw new IdleaseError(
      'BAD_CONFIG',
      `binlog_format is STATEMENT: MariaDB refuses an insert that draws from a SEQUENCE in a DEFAULT under it (ERROR 1665), and a replica would compute other IDs. ` +
        `Set binlog_format = ROW (or MIXED): SET GLOBAL binlog_format = 'ROW', and binlog_format = ROW under [mysqld] in the server's config. Then rerun this command.`,
    );
  }
}

/** The installed state, or undefined when next_id() is not installed in this database. */
export async function readMysqlNextIdState(db: SqlExecutor): Promise<MysqlNextIdState | undefined> {
  const exists = await db.run(
    `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ${currentSchemaExpr(f)} AND TABLE_NAME IN (?, ?)`,
    [MYSQL_NEXT_ID_TABLE, MYSQL_NEXT_ID_SEQUENCE],
  );
  if (Number(exists.rows[0]?.[0]) < 2) return undefined;
  const res = await db.run(
    `SELECT shard, time_bits, shard_bits, sequence_bits, ${asText(f, 'epoch_ms')}, failover_gap_ms, home_server_id FROM ${q(MYSQL_NEXT_ID_TABLE)} WHERE id = 1`,
    [],
  );
  const row = res.rows[0];
  if (!row) return undefined;
  const [shard, timeBits, shardBits, sequenceBits, epoch, gap, home] = row.map((v) => Number(v));
  return Object.freeze({
    shard: shard!,
    layout: resolveLayout({ timeBits: timeBits!, shardBits: shardBits!, sequenceBits: sequenceBits!, epoch: epoch! }, null),
    gapMs: gap!,
    homeServerId: home!,
  });
}

export interface AttachedColumn {
  readonly table: string;
  readonly column: string;
}

/** Columns (in any database) whose DEFAULT draws from this database's next_id() sequence. */
export async function mysqlNextIdAttached(db: SqlExecutor): Promise<AttachedColumn[]> {
  const res = await db.run(
    `SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS
      WHERE COLUMN_DEFAULT LIKE CONCAT('%nextval(\`', ${currentSchemaExpr(f)}, '\`.\`${MYSQL_NEXT_ID_SEQUENCE}\`)%')
      ORDER BY 1, 2, 3`,
    [],
  );
  const here = String((await db.run(`SELECT ${currentSchemaExpr(f)}`, [])).rows[0]?.[0] ?? '');
  return res.rows.map(([schema, table, column]) => ({
    table: String(schema) === here ? String(table) : `${String(schema)}.${String(table)}`,
    column: String(column),
  }));
}

/** This server's @@server_id and the time field's lag now (clock − the time of the next counter), in ms. */
export async function mysqlNextIdNow(db: SqlExecutor, s: MysqlNextIdState): Promise<{ serverId: number; lagMs: number }> {
  const res = await db.run(
    `SELECT @@server_id, ${asText(f, 'next_not_cached_value')}, ${asText(f, `CAST(FLOOR(${clockMs(f)}) AS SIGNED)`)} FROM ${q(MYSQL_NEXT_ID_SEQUENCE)}`,
    [],
  );
  const [serverId, next, now] = res.rows[0]!;
  const nextMs = (toBigInt(next, 'next_not_cached_value') >> BigInt(s.layout.sequenceBits)) + BigInt(s.layout.epochMs);
  return { serverId: Number(serverId), lagMs: Number(toBigInt(now, 'clock') - nextMs) };
}

/**
 * Raise the sequence to at least `aheadMs` past max(its value, the clock) — a literal SETVAL,
 * as SETVAL takes no expression. Never lowers it (SETVAL ignores a lower value).
 */
export async function raiseMysqlNextIdSequence(db: SqlExecutor, s: MysqlNextIdInstall, aheadMs: number): Promise<void> {
  const S = BigInt(s.layout.sequenceBits);
  const res = await db.run(
    `SELECT ${asText(f, 'next_not_cached_value')}, ${asText(f, clockCounter(s))} FROM ${q(MYSQL_NEXT_ID_SEQUENCE)}`,
    [],
  );
  const [next, clock] = res.rows[0]!.map((v) => toBigInt(v, 'sequence'));
  const base = next! > clock! ? next! : clock!;
  const cap = maxCounter(s.layout, s.gapMs);
  const target = base + (BigInt(aheadMs) << S);
  await db.run(`DO SETVAL(${q(MYSQL_NEXT_ID_SEQUENCE)}, ${intLiteral(target > cap ? cap : target)})`, []);
}

export async function recordMysqlNextIdHome(db: SqlExecutor): Promise<void> {
  await db.run(`UPDATE ${q(MYSQL_NEXT_ID_TABLE)} SET home_server_id = @@server_id WHERE id = 1`, []);
}

/** Re-create the ticker here, enabled: an event that arrived by replication is SLAVESIDE_DISABLED. */
export async function enableMysqlNextIdTicker(db: SqlExecutor): Promise<void> {
  await db.run(`ALTER EVENT ${q(MYSQL_NEXT_ID_EVENT)} ENABLE`, []);
}

export interface ColumnShape {
  readonly dataType: string;
  readonly extra: string;
  readonly generated: boolean;
}

export async function mysqlColumnShape(db: SqlExecutor, table: string, column: string): Promise<ColumnShape | undefined> {
  const res = await db.run(
    `SELECT DATA_TYPE, EXTRA, IS_GENERATED FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ${currentSchemaExpr(f)} AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
    [table, column],
  );
  const row = res.rows[0];
  if (!row) return undefined;
  return { dataType: String(row[0]).toLowerCase(), extra: String(row[1] ?? '').toLowerCase(), generated: String(row[2]) === 'ALWAYS' };
}

export async function setMysqlColumnDefault(db: SqlExecutor, table: string, column: string, expression: string | null): Promise<void> {
  await db.run(
    `ALTER TABLE ${q(table)} ALTER COLUMN ${q(column)} ${expression === null ? 'DROP DEFAULT' : `SET DEFAULT ${expression}`}`,
    [],
  );
}
