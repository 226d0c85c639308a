/**
 * `attach`: the one step that makes a table's column take next_id() on insert, on either
 * engine, so the user writes no engine-specific DDL. On both the DEFAULT is the ID expression
 * itself rather than a function call: PostgreSQL's is next_id()'s fast path (no PL/pgSQL call
 * per row; dialects/next-id.ts), MariaDB's the composition with the failover fence (a stored
 * function is refused there; dialects/next-id-mysql.ts). `form: 'call'` keeps PostgreSQL's old
 * `DEFAULT <schema>.next_id()`. `detach` drops the DEFAULT; `status` reports the install.
 */
import { declaredEngine, type Engine } from '../dialects/engine.js';
import { typedConnectionErrors } from '../dialects/connection-errors.js';
import {
  nextIdCall,
  nextIdDefaultExpression,
  nextIdDependents,
  nextIdTimeField,
  postgresColumnShape,
  postgresTableExists,
  recordPostgresReplacedDefault,
  takePostgresReplacedDefault,
  readNextIdInstall,
  setPostgresColumnDefault,
} from '../dialects/next-id.js';
import {
  checkMysqlNextIdServer,
  enableMysqlNextIdTicker,
  mysqlColumnShape,
  mysqlTableExists,
  recordMysqlReplacedDefault,
  takeMysqlReplacedDefault,
  mysqlNextIdAttached,
  mysqlNextIdExpression,
  mysqlNextIdNow,
  mysqlServerId,
  readMysqlNextIdState,
  rehomeMysqlNextId,
  setMysqlColumnDefault,
  type MysqlNextIdState,
} from '../dialects/next-id-mysql.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { executorFor, type KnexOrPool } from '../drivers/index.js';
import { IdleaseError } from '../errors.js';
import { validateIdentifier, validateUserIdentifier } from '../identifiers.js';
import type { IdLayout } from '../layout/index.js';

export interface AttachNextIdOptions {
  /** The table: `orders`, or on PostgreSQL `app.orders`. */
  readonly table: string;
  /** The column that takes the IDs (bigint). Default `id`. */
  readonly column?: string;
  /** PostgreSQL: the schema next_id() was installed in (default `public`). Not on MariaDB (one per database). */
  readonly schema?: string;
  /**
   * PostgreSQL: what the DEFAULT is. `'expression'` (default): next_id()'s fast path itself, the
   * cheaper per row (bulk inserts, prepared statements). `'call'`: `<schema>.next_id()`, cheaper
   * to plan, so faster for single-row INSERTs sent unprepared (each planned anew). Same IDs,
   * same guarantees. MariaDB has only the expression.
   */
  readonly form?: 'expression' | 'call';
  /**
   * attach: replace a DEFAULT the column already has (a bigserial's `nextval(…)`, a literal);
   * without it such a column is refused. detach puts the replaced DEFAULT back. Default false.
   */
  readonly replace?: boolean;
}

export interface NextIdAttachment {
  readonly table: string;
  readonly column: string;
  /** The DEFAULT now on the column (attach) or that was dropped (detach). */
  readonly expression: string;
  /** attach: the DEFAULT it replaced (replace: true); detach: the DEFAULT it put back. Absent when none. */
  readonly previous?: string;
}

export interface NextIdStatus {
  readonly engine: 'postgres' | 'mariadb';
  /** What `schema` names: a schema inside the database (PostgreSQL) or the database itself (MariaDB). */
  readonly namespace: 'schema' | 'database';
  /** PostgreSQL: the schema; MariaDB: the database. */
  readonly schema: string;
  readonly shard: number;
  readonly layout: Readonly<{ timeBits: number; shardBits: number; sequenceBits: number; epochMs: number; epoch: string }>;
  readonly attached: ReadonlyArray<Readonly<{ table: string; column: string }>>;
  /**
   * How far the time field of the next ID would trail the clock now, ms (0 when on it or ahead).
   * PostgreSQL: at most a few ms whatever the last insert was (a draw further behind is caught up
   * to the clock), so an idle hour is no lag. MariaDB: within a tick while the ticker runs; a
   * stopped ticker (event scheduler off, ticker disabled) grows it second by second.
   */
  readonly lagMs: number;
  /** How far it would run ahead of the clock, ms (a burst, `next-id bump --ahead-ms`, a failover's jump). */
  readonly leadMs: number;
  /** MariaDB: @@GLOBAL.server_id of the home server (inserts elsewhere fail until it is made home) and of this one. */
  readonly homeServerId?: number;
  readonly serverId?: number;
  /** MariaDB: this server's ticker event (ENABLED, DISABLED, SLAVESIDE_DISABLED: arrived by replication) and whether it can run now. */
  readonly ticker?: string;
  readonly tickerRuns?: boolean;
  readonly readOnly?: boolean;
  /** MariaDB: the fence's gap, in ms. */
  readonly failoverGapMs?: number;
}

function tableParts(table: unknown, engine: Engine): { name: string; quoted: string; text: string } {
  if (typeof table !== 'string')
    throw new IdleaseError('BAD_ARGUMENT', `table must be a table name such as 'orders', got ${String(table)}.`);
  const parts = table.split('.');
  if (parts.length === 2 && engine.namespaces === 'schema') {
    const s = validateUserIdentifier(parts[0], 'table (schema part)');
    const t = validateUserIdentifier(parts[1], 'table');
    return { name: t, quoted: `${engine.quote(s)}.${engine.quote(t)}`, text: `${s}.${t}` };
  }
  const t = validateUserIdentifier(table, 'table');
  return { name: t, quoted: engine.quote(t), text: t };
}

async function requirePostgresInstall(db: SqlExecutor, schema: string) {
  const installed = await readNextIdInstall(db, schema);
  if (installed === undefined) {
    throw new IdleaseError(
      'NOT_MIGRATED',
      `No idlease next_id() in schema ${schema}. Install it: migrate(knex, { segments: false, nextId: { schema: '${schema}' } }).`,
      {
        cli: {
          message: `No idlease next_id() in schema ${schema}. Install it: \`{idlease} migrate --no-segments --next-id --next-id-schema ${schema}\`, or name the schema it is in with --next-id-schema.`,
        },
      },
    );
  }
  return installed;
}

async function requireMysqlInstall(db: SqlExecutor): Promise<MysqlNextIdState> {
  const state = await readMysqlNextIdState(db);
  if (state === undefined) {
    throw new IdleaseError(
      'NOT_MIGRATED',
      'No idlease next_id() in this database. Install it: migrate(knex, { segments: false, nextId: true }).',
      {
        cli: { message: 'No idlease next_id() in this database. Install it: `{idlease} migrate --no-segments --next-id`.' },
      },
    );
  }
  if (!state.current) {
    throw new IdleaseError(
      'NOT_MIGRATED',
      'next_id() here was installed by an older idlease, whose failover fence repeats IDs after two failovers in a row. Upgrade it first: migrate(knex, { segments: false, nextId: true }).',
      {
        cli: {
          message:
            'next_id() here was installed by an older idlease, whose failover fence repeats IDs after two failovers in a row. Upgrade it first: `{idlease} migrate --no-segments --next-id`.',
        },
      },
    );
  }
  return state;
}

function refuseSchemaOnMysql(schema: string | undefined): void {
  if (schema !== undefined) {
    throw new IdleaseError(
      'BAD_CONFIG',
      "schema (--next-id-schema) applies to PostgreSQL only; on MariaDB next_id() lives in the connection's database.",
    );
  }
}

/** Make `table.column` take next_id() on insert. Idempotent. */
export async function attachNextId(db: KnexOrPool, options: AttachNextIdOptions): Promise<NextIdAttachment> {
  const exec = executorFor(db);
  // The driver's engine (the server's answer once asked): the options are checked before any statement.
  const engine = declaredEngine(exec);
  // next_id() as a function (PostgreSQL) is attached per schema; as a ticker (MariaDB) per database.
  const postgres = engine.nextId === 'function';
  const t = tableParts(options?.table, engine);
  const column = validateUserIdentifier(options.column ?? 'id', 'column');
  const form = options.form ?? 'expression';
  if (form !== 'expression' && form !== 'call') {
    throw new IdleaseError('BAD_ARGUMENT', `form must be 'expression' or 'call', got ${JSON.stringify(form)}.`);
  }
  if (options.replace !== undefined && typeof options.replace !== 'boolean') {
    throw new IdleaseError('BAD_ARGUMENT', `replace must be true or false, got ${JSON.stringify(options.replace)}.`);
  }
  return typedConnectionErrors(async () => {
    if (postgres) {
      const schema = validateIdentifier(options.schema ?? 'public', 'schema');
      const installed = await requirePostgresInstall(exec, schema);
      const shape = await postgresColumnShape(exec, t.quoted, column);
      if (shape === undefined && !(await postgresTableExists(exec, t.quoted))) throw noTable(t.text);
      refuseColumn(t.text, column, shape && { bigint: shape.dataType === 'bigint', auto: shape.identity, generated: shape.generated });
      const expression = form === 'call' ? nextIdCall(schema) : nextIdDefaultExpression({ schema, ...installed });
      const attached = (await nextIdDependents(exec, schema)).some((d) => d.column === column && sameTable(d.table, t.text));
      const previous = attached ? null : (shape?.default ?? null);
      if (previous !== null) {
        refuseReplacing(t.text, column, previous, options.replace);
        await recordPostgresReplacedDefault(exec, schema, t.text, column, previous);
      }
      await setPostgresColumnDefault(exec, t.quoted, column, expression);
      return Object.freeze({ table: t.text, column, expression, ...(previous !== null ? { previous } : {}) });
    }
    refuseSchemaOnMysql(options.schema);
    if (form === 'call') {
      throw new IdleaseError(
        'BAD_ARGUMENT',
        "form: 'call' applies to PostgreSQL only: MariaDB allows no stored function in a DEFAULT, so attach writes the ID expression there.",
        {
          cli: {
            message:
              '--call applies to PostgreSQL only: MariaDB allows no stored function in a DEFAULT, so attach writes the ID expression there.',
          },
        },
      );
    }
    await checkMysqlNextIdServer(exec);
    let state = await requireMysqlInstall(exec);
    const shape = await mysqlColumnShape(exec, t.name, column);
    if (shape === undefined && !(await mysqlTableExists(exec, t.name))) throw noTable(t.text);
    refuseColumn(
      t.text,
      column,
      shape && { bigint: shape.dataType === 'bigint', auto: shape.extra.includes('auto_increment'), generated: shape.generated },
    );
    const attached = (await mysqlNextIdAttached(exec)).some((a) => a.table === t.name && a.column === column);
    const previous = attached ? null : (shape?.default ?? null);
    if (previous !== null) refuseReplacing(t.text, column, previous, options.replace);
    if ((await mysqlServerId(exec)) !== state.homeServerId) state = await moveHome(exec);
    const expression = mysqlNextIdExpression(state);
    if (previous !== null) await recordMysqlReplacedDefault(exec, t.name, column, previous);
    await setMysqlColumnDefault(exec, t.name, column, expression);
    return Object.freeze({ table: t.text, column, expression, ...(previous !== null ? { previous } : {}) });
  });
}

/**
 * Attach on a server other than home (a promoted replica, whose inserts fail until it is home)
 * makes it home through the procedure the ticker also calls (dialects/next-id-mysql.ts: one jump
 * past this server's copy of the sequence, every attached DEFAULT rewritten), then enables the
 * ticker here: an event that arrived by replication is SLAVESIDE_DISABLED.
 */
async function moveHome(exec: SqlExecutor): Promise<MysqlNextIdState> {
  await rehomeMysqlNextId(exec);
  const moved = await requireMysqlInstall(exec);
  const here = await mysqlNextIdNow(exec, moved);
  if (moved.homeServerId !== here.serverId) {
    throw new IdleaseError(
      'BAD_CONFIG',
      here.readOnly
        ? `This server (server_id ${here.serverId}) is read-only: next_id() is made home only on a primary. Run attach on the primary.`
        : `This server (server_id ${here.serverId}) could not be made home within 10 s (another attach or the ticker holds the rehome lock, or an attached table is locked). Rerun attach.`,
    );
  }
  await enableMysqlNextIdTicker(exec);
  return moved;
}

/** regclass::text quotes where it must (`"Order"`, `app."Order"`: nextIdDependents); names hold no quote (validated). */
const sameTable = (listed: string, given: string) => listed.replace(/"/g, '') === given;

/** A DEFAULT the column already has is replaced only when asked: a bigserial's nextval(…) would vanish unseen. */
function refuseReplacing(table: string, column: string, previous: string, replace: boolean | undefined): void {
  if (replace === true) return;
  throw new IdleaseError(
    'BAD_ARGUMENT',
    `${table}.${column} already has DEFAULT ${previous}; attach would replace it. Pass replace: true (CLI: --replace) to replace it: detach then puts it back.`,
  );
}

function noTable(table: string): IdleaseError {
  return new IdleaseError(
    'BAD_ARGUMENT',
    `There is no table ${table} (on PostgreSQL: in the search_path, unless named with its schema, schema.table). Create it first, or check the name.`,
  );
}

function refuseColumn(table: string, column: string, shape: { bigint: boolean; auto: boolean; generated: boolean } | undefined): void {
  if (shape === undefined) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `${table} has no column ${column}. Name the ID column with column (CLI: --column <name>), or create it as bigint first.`,
    );
  }
  if (!shape.bigint) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `${table}.${column} is not a bigint: next_id() IDs need 64 bits. Change the column to bigint first.`,
    );
  }
  if (shape.auto || shape.generated) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `${table}.${column} is ${shape.generated ? 'a generated column' : 'an AUTO_INCREMENT / identity column'}: it already fills itself in. Drop that first (MariaDB: ALTER TABLE … MODIFY ${column} bigint NOT NULL; PostgreSQL: ALTER TABLE … ALTER COLUMN ${column} DROP IDENTITY).`,
    );
  }
}

/** Drop next_id() from `table.column`'s DEFAULT (the column and its data stay). */
export async function detachNextId(db: KnexOrPool, options: AttachNextIdOptions): Promise<NextIdAttachment> {
  const exec = executorFor(db);
  // The driver's engine (the server's answer once asked): the options are checked before any statement.
  const engine = declaredEngine(exec);
  // next_id() as a function (PostgreSQL) is attached per schema; as a ticker (MariaDB) per database.
  const postgres = engine.nextId === 'function';
  const t = tableParts(options?.table, engine);
  const column = validateUserIdentifier(options.column ?? 'id', 'column');
  return typedConnectionErrors(async () => {
    if (postgres) {
      const schema = validateIdentifier(options.schema ?? 'public', 'schema');
      const attached = await nextIdDependents(exec, schema);
      const hit = attached.find((d) => d.column === column && sameTable(d.table, t.text));
      if (hit === undefined) throw notAttached(t.text, column);
      const dropped = (await postgresColumnShape(exec, t.quoted, column))?.default ?? '';
      const previous = await takePostgresReplacedDefault(exec, schema, t.text, column);
      await setPostgresColumnDefault(exec, t.quoted, column, previous ?? null);
      return Object.freeze({ table: t.text, column, expression: dropped, ...(previous !== undefined ? { previous } : {}) });
    }
    refuseSchemaOnMysql(options.schema);
    const state = await requireMysqlInstall(exec);
    const attached = await mysqlNextIdAttached(exec);
    if (!attached.some((a) => a.table === t.name && a.column === column)) throw notAttached(t.text, column);
    const previous = await takeMysqlReplacedDefault(exec, t.name, column);
    await setMysqlColumnDefault(exec, t.name, column, previous ?? null);
    return Object.freeze({
      table: t.text,
      column,
      expression: mysqlNextIdExpression(state),
      ...(previous !== undefined ? { previous } : {}),
    });
  });
}

function notAttached(table: string, column: string): IdleaseError {
  return new IdleaseError(
    'BAD_ARGUMENT',
    `${table}.${column} does not take next_id(): nothing to detach. See which columns do: next-id status.`,
  );
}

/** The install, the attached columns and the time field's lag now. */
export async function nextIdStatus(db: KnexOrPool, options: { schema?: string } = {}): Promise<NextIdStatus> {
  const exec = executorFor(db);
  return typedConnectionErrors(async () => {
    if (declaredEngine(exec).nextId === 'function') {
      const schema = validateIdentifier(options.schema ?? 'public', 'schema');
      const installed = await requirePostgresInstall(exec, schema);
      const attached = await nextIdDependents(exec, schema);
      return Object.freeze({
        engine: 'postgres' as const,
        namespace: 'schema' as const,
        schema,
        shard: installed.shard,
        layout: layoutOf(installed.layout),
        attached,
        ...(await nextIdTimeField(exec, schema, installed.layout)),
      });
    }
    refuseSchemaOnMysql(options.schema);
    const state = await requireMysqlInstall(exec);
    const now = await mysqlNextIdNow(exec, state);
    const database = String((await exec.run('SELECT DATABASE()', [])).rows[0]?.[0]);
    return Object.freeze({
      engine: 'mariadb' as const,
      namespace: 'database' as const,
      schema: database,
      shard: state.shard,
      layout: layoutOf(state.layout),
      attached: await mysqlNextIdAttached(exec),
      lagMs: now.lagMs,
      leadMs: now.leadMs,
      homeServerId: state.homeServerId,
      serverId: now.serverId,
      ticker: now.ticker,
      tickerRuns: now.ticker === 'ENABLED' && now.eventScheduler.toUpperCase() === 'ON' && !now.readOnly,
      readOnly: now.readOnly,
      failoverGapMs: state.gapMs,
    });
  });
}

function layoutOf(l: IdLayout) {
  return Object.freeze({
    timeBits: l.timeBits,
    shardBits: l.shardBits,
    sequenceBits: l.sequenceBits,
    epochMs: l.epochMs,
    epoch: new Date(l.epochMs).toISOString(),
  });
}
