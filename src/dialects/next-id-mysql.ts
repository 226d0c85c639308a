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
 * The failover fence: each server's term as primary starts with one jump. `home` is the
 * @@GLOBAL.server_id the install was last made home on, written into the DEFAULT as a literal:
 *
 *   IF(@@GLOBAL.server_id = home, <the composition>, NEXT VALUE FOR idlease_next_id_not_home)
 *
 * On any other server — a promoted replica, whose copy of the sequence may trail what the old
 * primary handed out — the insert draws from a sequence that is used up and fails with ER 4084
 * ("Sequence '….idlease_next_id_not_home' has run out") until that server is made home. Making
 * home is one procedure, `idlease_next_id_rehome()`: it jumps the sequence the failover gap past
 * max(its copy, the clock), rewrites every attached DEFAULT with the new home, and records it.
 * The ticker calls it at every run, so wherever events run on the new primary (a failover manager
 * that enables them, as MaxScale's handle_events does) the server makes itself home within a
 * second; elsewhere `next-id attach` calls it and enables the ticker. Because every term jumps
 * from its own copy, any number of promotions in any order each jump once: the fence tells
 * servers apart by refusing, never by a shared offset. (The fence it replaces added the same
 * 60 s on every server other than home, so two promotions in a row handed out the same IDs.)
 *
 * A server whose server_id was changed while it ran as home is the same server, not a promoted
 * one: the ticker leaves a heartbeat on it that is never replicated (sql_log_bin = 0), naming the
 * server_id it ticked as and where it runs (host, port, data directory), and rehome skips the
 * jump when that heartbeat is this server's own — the same place — and fresh. @@GLOBAL, not the session copy a connection takes when it opens, so sessions opened
 * before the change agree with those opened after.
 */
import { resolveLayout, type IdLayout } from '../layout/index.js';
import { IdleaseError } from '../errors.js';
import { toBigInt } from '../ids.js';
import { asText, clockMs, currentSchemaExpr, intLiteral, quoteIdent, stringLiteral } from './flavor.js';
import type { SqlExecutor } from './sql.js';

export const MYSQL_NEXT_ID_TABLE = 'idlease_next_id';
export const MYSQL_NEXT_ID_SEQUENCE = 'idlease_next_id_seq';
export const MYSQL_NEXT_ID_EVENT = 'idlease_next_id_tick';
/** A used-up sequence: a DEFAULT that draws from it (off home) fails with ER 4084 naming it. */
export const MYSQL_NEXT_ID_NOT_HOME = 'idlease_next_id_not_home';
/** Makes the server it runs on home: called by the ticker and by attach. */
export const MYSQL_NEXT_ID_REHOME = 'idlease_next_id_rehome';
/** The ticker's heartbeat, never replicated: tells a renamed home from a promoted replica. */
export const MYSQL_NEXT_ID_LOCAL = 'idlease_next_id_local';
/** A heartbeat this recent (ms) on this server, naming home: home's server_id changed, no failover. */
const RENAMED_WITHIN_MS = 3_000;
/**
 * Where a server runs: a heartbeat copied elsewhere (a dump or backup restored into a replica that
 * is promoted moments later) names another place, so it is not taken for this server's own.
 */
const PLACE = "CONCAT(@@GLOBAL.hostname, ':', @@GLOBAL.port, ':', @@GLOBAL.datadir)";
/** DDL waits of the rehome (seconds): an attached table locked by a long statement delays it, never forever. */
const REHOME_LOCK_WAIT_S = 10;
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
  /** @@GLOBAL.server_id of the server made home last (install, attach or the ticker): inserts elsewhere fail until it is made home. */
  readonly homeServerId: number;
  /** The rehome procedure and the used-up sequence exist (installed by 0.3 or later): false until `migrate --next-id` reruns. */
  readonly current: boolean;
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
      `INSERT IGNORE INTO ${q(MYSQL_NEXT_ID_TABLE)} VALUES (1, ${intLiteral(o.shard)}, ${intLiteral(timeBits)}, ${intLiteral(shardBits)}, ${intLiteral(sequenceBits)}, ${intLiteral(epochMs)}, ${intLiteral(o.gapMs)}, @@GLOBAL.server_id)`,
      `CREATE SEQUENCE IF NOT EXISTS ${q(MYSQL_NEXT_ID_SEQUENCE)} START WITH 0 MINVALUE 0 MAXVALUE ${intLiteral(maxCounter(o.layout, o.gapMs))} INCREMENT BY 1 CACHE ${intLiteral(CACHE)} NOCYCLE`,
      // Off home the DEFAULT draws from this and fails: used up at once (SETVAL past its end,
      // idempotent on a rerun; the dump of it restores used up too).
      `CREATE SEQUENCE IF NOT EXISTS ${q(MYSQL_NEXT_ID_NOT_HOME)} START WITH 1 MINVALUE 1 MAXVALUE 2 INCREMENT BY 1 NOCACHE NOCYCLE`,
      `DO SETVAL(${q(MYSQL_NEXT_ID_NOT_HOME)}, 2)`,
      `CREATE TABLE IF NOT EXISTS ${q(MYSQL_NEXT_ID_LOCAL)} (
  id TINYINT NOT NULL PRIMARY KEY,
  server_id BIGINT NOT NULL,
  place VARCHAR(1024) NOT NULL,
  ticked_ms BIGINT NOT NULL
) ENGINE=InnoDB`,
      rehomeProcedure(o),
      // The ticker: a 1 s event looping every TICK_MS (the scheduler's own period is whole
      // seconds). Runs that overlap by a few ms are harmless: SETVAL only ever raises. Each run
      // first makes this server home if it is not (rehome, a no-op at home); it does nothing on
      // a read-only server (a demoted primary whose event is still enabled), so it never writes
      // there.
      // In UTC: the scheduler steps an event's runs in the zone it was created in, and across a
      // DST fall-back in a zone such as Europe/Berlin the next run of an EVERY 1 SECOND event
      // came an hour later (the time field stood still for the repeated hour).
      `SET STATEMENT time_zone = '+00:00' FOR CREATE OR REPLACE EVENT ${q(MYSQL_NEXT_ID_EVENT)} ON SCHEDULE EVERY 1 SECOND ON COMPLETION PRESERVE ENABLE
COMMENT ${stringLiteral(f, `idlease next_id: moves ${MYSQL_NEXT_ID_SEQUENCE} up to the clock every ${TICK_MS} ms`)}
DO BEGIN
  DECLARE i INT DEFAULT 0;
  DECLARE home BIGINT DEFAULT NULL;
  IF @@GLOBAL.read_only = 0 THEN
    -- A failed rehome (its lock or a DDL wait timed out; the procedure missing from a dump made
    -- without --routines) is retried at the next run; it must not stop the ticks at home.
    BEGIN
      DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
      CALL ${q(MYSQL_NEXT_ID_REHOME)}();
    END;
  END IF;
  SELECT home_server_id INTO home FROM ${q(MYSQL_NEXT_ID_TABLE)} WHERE id = 1;
  -- Ticks stay out of the binary log (a few hundred bytes each, 200 a second): a replica's
  -- copy of the sequence follows every draw anyway, through the refill that each draw after a
  -- tick writes. Without the privilege to do so the ticks are logged, which is only bigger.
  BEGIN
    DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
    SET SESSION sql_log_bin = 0;
  END;
  IF @@GLOBAL.read_only = 0 AND @@GLOBAL.server_id = home THEN
    -- The heartbeat: which server_id ticked here, and when. Not replicated when sql_log_bin is off.
    INSERT INTO ${q(MYSQL_NEXT_ID_LOCAL)} (id, server_id, place, ticked_ms) VALUES (1, home, ${PLACE}, ${clockMsInt()})
      ON DUPLICATE KEY UPDATE server_id = VALUES(server_id), place = VALUES(place), ticked_ms = VALUES(ticked_ms);
  END IF;
  WHILE i < ${intLiteral(tickLoop)} AND @@GLOBAL.read_only = 0 AND @@GLOBAL.server_id = home DO
    EXECUTE IMMEDIATE CONCAT('DO SETVAL(${q(MYSQL_NEXT_ID_SEQUENCE)}, ', ${clockCounter(o)}, ')');
    DO SLEEP(${(TICK_MS / 1000).toFixed(3)});
    SET i = i + 1;
  END WHILE;
END`,
    ],
    down: [
      `DROP EVENT IF EXISTS ${q(MYSQL_NEXT_ID_EVENT)}`,
      `DROP PROCEDURE IF EXISTS ${q(MYSQL_NEXT_ID_REHOME)}`,
      `DROP TABLE IF EXISTS ${q(MYSQL_NEXT_ID_LOCAL)}`,
      `DROP SEQUENCE IF EXISTS ${q(MYSQL_NEXT_ID_NOT_HOME)}`,
      `DROP SEQUENCE IF EXISTS ${q(MYSQL_NEXT_ID_SEQUENCE)}`,
      `DROP TABLE IF EXISTS ${q(MYSQL_NEXT_ID_TABLE)}`,
      `DROP TABLE IF EXISTS ${q(MYSQL_NEXT_ID_REPLACED)}`,
    ],
  };
}

/** The column DEFAULT around its home literal: the composition at home, a refusal elsewhere. */
function expressionAroundHome(o: MysqlNextIdInstall): [before: string, after: string] {
  const S = BigInt(o.layout.sequenceBits);
  const shardShift = BigInt(o.layout.shardBits) + S;
  const seq = q(MYSQL_NEXT_ID_SEQUENCE);
  const stretch = (1n << shardShift) - (1n << S);
  const shardPart = BigInt(o.shard) << S;
  const compose = `NEXT VALUE FOR ${seq} + (PREVIOUS VALUE FOR ${seq} >> ${intLiteral(S)}) * ${intLiteral(stretch)} + ${intLiteral(shardPart)}`;
  return ['(IF(@@GLOBAL.server_id = ', `, ${compose}, NEXT VALUE FOR ${q(MYSQL_NEXT_ID_NOT_HOME)}))`];
}

/** The column DEFAULT attach writes: the composition on `home`, ER 4084 (the used-up sequence) on any other server. */
export function mysqlNextIdExpression(s: MysqlNextIdState): string {
  const [before, after] = expressionAroundHome(s);
  return `${before}${intLiteral(s.homeServerId)}${after}`;
}

/** The clock in whole ms, as an integer expression. */
function clockMsInt(): string {
  return `CAST(FLOOR(${clockMs(f)}) AS SIGNED)`;
}

/**
 * Makes the server it runs on home (a no-op at home or on a read-only server), under a named
 * lock so that overlapping ticker runs and an attach do it once: unless this server ticked as
 * home moments ago under another server_id (the heartbeat: its server_id was changed, it is no
 * failover), the sequence jumps the gap past max(its copy, the clock) — past anything the last
 * primary handed out that this copy may lack; every attached DEFAULT of this database is
 * rewritten with this server as home; home is recorded. Until the rewrite, inserts here fail
 * (the DEFAULTs name another home), so no ID is made between the jump and the rewrite.
 */
function rehomeProcedure(o: MysqlNextIdInstall): string {
  const S = BigInt(o.layout.sequenceBits);
  const [before, after] = expressionAroundHome(o);
  const lock = `CONCAT('idlease_next_id_rehome.', DATABASE())`;
  return `CREATE OR REPLACE PROCEDURE ${q(MYSQL_NEXT_ID_REHOME)}()
MODIFIES SQL DATA
COMMENT ${stringLiteral(f, 'idlease next_id: make this server home (jump the sequence unless only its server_id changed, rewrite the attached DEFAULTs)')}
BEGIN
  DECLARE me BIGINT DEFAULT @@GLOBAL.server_id;
  DECLARE home BIGINT DEFAULT NULL;
  DECLARE renamed INT DEFAULT 0;
  DECLARE copied BIGINT;
  DECLARE done INT DEFAULT 0;
  DECLARE t, c VARCHAR(64);
  DECLARE cols CURSOR FOR
    SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS
     WHERE TABLE_SCHEMA = DATABASE()
       AND COLUMN_DEFAULT LIKE CONCAT('%nextval(\`', DATABASE(), '\`.\`${MYSQL_NEXT_ID_SEQUENCE}\`)%');
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1;
  SELECT home_server_id INTO home FROM ${q(MYSQL_NEXT_ID_TABLE)} WHERE id = 1;
  IF home <> me AND @@GLOBAL.read_only = 0 AND GET_LOCK(${lock}, ${intLiteral(REHOME_LOCK_WAIT_S)}) = 1 THEN
    SELECT home_server_id INTO home FROM ${q(MYSQL_NEXT_ID_TABLE)} WHERE id = 1;
    IF home <> me THEN
      SELECT COUNT(*) INTO renamed FROM ${q(MYSQL_NEXT_ID_LOCAL)}
       WHERE id = 1 AND server_id = home AND place = ${PLACE} AND ticked_ms > ${clockMsInt()} - ${intLiteral(RENAMED_WITHIN_MS)};
      IF renamed = 0 THEN
        SELECT next_not_cached_value INTO copied FROM ${q(MYSQL_NEXT_ID_SEQUENCE)};
        EXECUTE IMMEDIATE CONCAT('DO SETVAL(${q(MYSQL_NEXT_ID_SEQUENCE)}, ',
          LEAST(${intLiteral(maxCounter(o.layout, o.gapMs))}, GREATEST(copied, ${clockCounter(o)}) + ${intLiteral(BigInt(o.gapMs) << S)}), ')');
      END IF;
      SET @idlease_lock_wait = @@SESSION.lock_wait_timeout;
      SET SESSION lock_wait_timeout = ${intLiteral(REHOME_LOCK_WAIT_S)};
      SET done = 0;
      OPEN cols;
      rewrite: LOOP
        FETCH cols INTO t, c;
        IF done = 1 THEN LEAVE rewrite; END IF;
        EXECUTE IMMEDIATE CONCAT('ALTER TABLE \`', REPLACE(t, '\`', '\`\`'), '\` ALTER COLUMN \`', REPLACE(c, '\`', '\`\`'),
          '\` SET DEFAULT ', ${stringLiteral(f, before.replace(/'/g, "''"))}, me, ${stringLiteral(f, after.replace(/'/g, "''"))});
      END LOOP;
      CLOSE cols;
      SET SESSION lock_wait_timeout = @idlease_lock_wait;
      UPDATE ${q(MYSQL_NEXT_ID_TABLE)} SET home_server_id = me WHERE id = 1;
    END IF;
    DO RELEASE_LOCK(${lock});
  END IF;
END`;
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
  const routines = await db.run(
    `SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = ${currentSchemaExpr(f)} AND ROUTINE_NAME = ? AND ROUTINE_TYPE = 'PROCEDURE'`,
    [MYSQL_NEXT_ID_REHOME],
  );
  return Object.freeze({
    current: Number(routines.rows[0]?.[0]) === 1,
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

export interface MysqlNextIdHere {
  /** @@GLOBAL.server_id of this server. */
  readonly serverId: number;
  /**
   * How far the next ID's time field trails the clock now, ms: the DEFAULT draws the counter as it
   * is, so a ticker that stopped shows here as it grows (running, it stays within a tick).
   */
  readonly lagMs: number;
  /** How far it runs ahead of the clock, ms (a burst, a bump, the jump that made this server home). */
  readonly leadMs: number;
  readonly readOnly: boolean;
  /** The ticker event's status here: ENABLED, DISABLED, or SLAVESIDE_DISABLED (arrived by replication). */
  readonly ticker: string;
  readonly eventScheduler: string;
}

/** What this server is for next_id(): its server_id, the time field's lag, and whether its ticker can run. */
export async function mysqlNextIdNow(db: SqlExecutor, s: MysqlNextIdState): Promise<MysqlNextIdHere> {
  const res = await db.run(
    `SELECT @@GLOBAL.server_id, ${asText(f, 'next_not_cached_value')}, ${asText(f, clockMsInt())}, @@GLOBAL.read_only, @@GLOBAL.event_scheduler,
            (SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = ${currentSchemaExpr(f)} AND EVENT_NAME = ?)
       FROM ${q(MYSQL_NEXT_ID_SEQUENCE)}`,
    [MYSQL_NEXT_ID_EVENT],
  );
  const [serverId, next, now, readOnly, scheduler, ticker] = res.rows[0]!;
  const nextMs = (toBigInt(next, 'next_not_cached_value') >> BigInt(s.layout.sequenceBits)) + BigInt(s.layout.epochMs);
  return {
    serverId: Number(serverId),
    lagMs: Math.max(0, Number(toBigInt(now, 'clock') - nextMs)),
    leadMs: Math.max(0, Number(nextMs - toBigInt(now, 'clock'))),
    readOnly: Number(readOnly) === 1,
    ticker: String(ticker ?? 'MISSING'),
    eventScheduler: String(scheduler),
  };
}

/** This server's @@GLOBAL.server_id (a 32-bit server number, not an ID: a JS number holds it exactly). */
export async function mysqlServerId(db: SqlExecutor): Promise<number> {
  return Number((await db.run('SELECT @@GLOBAL.server_id', [])).rows[0]?.[0]);
}

/** Make this server home (the procedure the ticker calls): a no-op at home or on a read-only server. */
export async function rehomeMysqlNextId(db: SqlExecutor): Promise<void> {
  await db.run(`CALL ${q(MYSQL_NEXT_ID_REHOME)}()`, []);
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

/** Re-create the ticker here, enabled: an event that arrived by replication is SLAVESIDE_DISABLED. */
export async function enableMysqlNextIdTicker(db: SqlExecutor): Promise<void> {
  await db.run(`ALTER EVENT ${q(MYSQL_NEXT_ID_EVENT)} ENABLE`, []);
}

export interface ColumnShape {
  readonly dataType: string;
  readonly extra: string;
  readonly generated: boolean;
  /** The column's DEFAULT as MariaDB shows it (SQL: a quoted literal or an expression), or null for none. */
  readonly default: string | null;
}

export async function mysqlColumnShape(db: SqlExecutor, table: string, column: string): Promise<ColumnShape | undefined> {
  const res = await db.run(
    `SELECT DATA_TYPE, EXTRA, IS_GENERATED, COLUMN_DEFAULT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ${currentSchemaExpr(f)} AND TABLE_NAME = ? AND COLUMN_NAME = ?`,
    [table, column],
  );
  const row = res.rows[0];
  if (!row) return undefined;
  return {
    dataType: String(row[0]).toLowerCase(),
    extra: String(row[1] ?? '').toLowerCase(),
    generated: String(row[2]) === 'ALWAYS',
    // MariaDB shows a column without a DEFAULT as NULL, and DEFAULT NULL as the text NULL.
    default: row[3] == null || String(row[3]) === 'NULL' ? null : String(row[3]),
  };
}

/** Whether `table` is a table of the connection's database: to tell a missing table from a missing column. */
export async function mysqlTableExists(db: SqlExecutor, table: string): Promise<boolean> {
  const res = await db.run(
    `SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ${currentSchemaExpr(f)} AND TABLE_NAME = ?`,
    [table],
  );
  return Number(res.rows[0]?.[0]) > 0;
}

/** The DEFAULTs `attach --replace` replaced (next-id.ts NEXT_ID_REPLACED), in the connection's database. */
export const MYSQL_NEXT_ID_REPLACED = 'idlease_next_id_replaced';

export async function recordMysqlReplacedDefault(db: SqlExecutor, table: string, column: string, previous: string): Promise<void> {
  await db.run(
    `CREATE TABLE IF NOT EXISTS ${q(MYSQL_NEXT_ID_REPLACED)} (table_name varchar(192) NOT NULL, column_name varchar(64) NOT NULL, previous_default text NOT NULL, replaced_at timestamp(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), PRIMARY KEY (table_name, column_name)) ENGINE=InnoDB`,
    [],
  );
  await db.run(
    `INSERT INTO ${q(MYSQL_NEXT_ID_REPLACED)} (table_name, column_name, previous_default) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE previous_default = VALUES(previous_default), replaced_at = CURRENT_TIMESTAMP(3)`,
    [table, column, previous],
  );
}

export async function takeMysqlReplacedDefault(db: SqlExecutor, table: string, column: string): Promise<string | undefined> {
  if (!(await mysqlTableExists(db, MYSQL_NEXT_ID_REPLACED))) return undefined;
  const res = await db.run(`SELECT previous_default FROM ${q(MYSQL_NEXT_ID_REPLACED)} WHERE table_name = ? AND column_name = ?`, [
    table,
    column,
  ]);
  const row = res.rows[0];
  if (row === undefined) return undefined;
  await db.run(`DELETE FROM ${q(MYSQL_NEXT_ID_REPLACED)} WHERE table_name = ? AND column_name = ?`, [table, column]);
  return String(row[0]);
}

export async function setMysqlColumnDefault(db: SqlExecutor, table: string, column: string, expression: string | null): Promise<void> {
  await db.run(
    `ALTER TABLE ${q(table)} ALTER COLUMN ${q(column)} ${expression === null ? 'DROP DEFAULT' : `SET DEFAULT ${expression}`}`,
    [],
  );
}
