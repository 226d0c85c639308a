/** Options and migrations for the Postgres next_id(): one schema (logical shard) per entry. */
import type { Knex } from 'knex';
import type { Engine } from '../dialects/engine.js';
import { dropNextIdDefaults, nextIdDdl, nextIdDependents, readNextIdInstall } from '../dialects/next-id.js';
import {
  checkMysqlNextIdServer,
  MYSQL_NEXT_ID_FAILOVER_GAP_MS,
  mysqlNextIdAttached,
  mysqlNextIdDdl,
  mysqlNextIdExpression,
  mysqlServerId,
  raiseMysqlNextIdSequence,
  readMysqlNextIdState,
  rehomeMysqlNextId,
  setMysqlColumnDefault,
} from '../dialects/next-id-mysql.js';
import { knexExecutor } from '../drivers/knex.js';
import { IdleaseError } from '../errors.js';
import { validateIdentifier } from '../identifiers.js';
import { resolveLayout, validateShard, type IdLayout, type LayoutOptions } from '../layout/index.js';
import { runAll, type IdleaseMigration } from './types.js';

export interface NextIdMigrateOptions extends LayoutOptions {
  /** Schema that holds the sequence and next_id() (created if missing). Default `public`. */
  schema?: string;
  /** Logical shard id stored in every ID. Default 0. */
  shard?: number;
  /**
   * Install this many shards at once: schemas `<schema>_<i>` with shard ids
   * `shard`, `shard + 1`, …  (like Instagram's `insta5`). Default: one, in `schema` itself.
   */
  shards?: number;
  /**
   * Down migration only: when table DEFAULTs call next_id(), drop those defaults too
   * (columns and data stay). Without it the down migration refuses and names them.
   */
  dropDependentDefaults?: boolean;
}

export type ResolvedNextId = Readonly<{
  schema: string;
  shard: number;
  layout: IdLayout;
  dropDependentDefaults: boolean;
}>;

const KNOWN = new Set(['schema', 'shard', 'shards', 'timeBits', 'shardBits', 'sequenceBits', 'epoch', 'dropDependentDefaults']);

function expand(o: NextIdMigrateOptions, index: number): ResolvedNextId[] {
  if (o === null || typeof o !== 'object') {
    throw new IdleaseError(
      'BAD_CONFIG',
      `nextId${index >= 0 ? `[${index}]` : ''} must be true or an object such as { schema: 'shard_5', shard: 5 }.`,
    );
  }
  for (const key of Object.keys(o)) {
    if (!KNOWN.has(key))
      throw new IdleaseError('BAD_CONFIG', `nextId: unknown option ${JSON.stringify(key)}. Known: ${[...KNOWN].join(', ')}.`);
  }
  const layout = resolveLayout({ timeBits: o.timeBits, shardBits: o.shardBits, sequenceBits: o.sequenceBits, epoch: o.epoch });
  const schema = validateIdentifier(o.schema ?? 'public', 'nextId.schema');
  const first = validateShard(o.shard ?? 0, layout, 'nextId.shard');
  if (o.dropDependentDefaults !== undefined && typeof o.dropDependentDefaults !== 'boolean') {
    throw new IdleaseError('BAD_CONFIG', `nextId.dropDependentDefaults must be true or false, got ${String(o.dropDependentDefaults)}.`);
  }
  const drop = o.dropDependentDefaults ?? false;
  if (o.shards === undefined) return [Object.freeze({ schema, shard: first, layout, dropDependentDefaults: drop })];
  if (!Number.isInteger(o.shards) || o.shards < 1) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `nextId.shards must be a positive integer (how many schemas to install), got ${String(o.shards)}.`,
    );
  }
  const list: ResolvedNextId[] = [];
  for (let i = 0; i < o.shards; i++) {
    const shard = validateShard(first + i, layout, `nextId.shard + ${i} (shards: ${o.shards})`);
    list.push(
      Object.freeze({
        schema: validateIdentifier(`${schema}_${shard}`, 'nextId.schema (with shards)'),
        shard,
        layout,
        dropDependentDefaults: drop,
      }),
    );
  }
  return list;
}

/**
 * Validate up front: every schema a valid identifier and used once, every shard id in range
 * for its layout and used once (two schemas with one shard id would hand out the same IDs).
 */
export function resolveNextIdOptions(input: boolean | NextIdMigrateOptions | NextIdMigrateOptions[] | undefined): ResolvedNextId[] {
  if (input === undefined || input === false) return [];
  if (input !== true && (input === null || typeof input !== 'object')) {
    throw new IdleaseError('BAD_CONFIG', 'nextId must be true, an options object, or an array of them (one per shard).');
  }
  const list = input === true ? [{}] : Array.isArray(input) ? input : [input];
  if (list.length === 0) throw new IdleaseError('BAD_CONFIG', 'nextId: the array is empty; give at least one { schema, shard }.');
  const resolved = list.flatMap((o, i) => expand(o, Array.isArray(input) ? i : -1));
  const schemas = new Map<string, number>();
  const shards = new Map<number, string>();
  for (const r of resolved) {
    if (schemas.has(r.schema))
      throw new IdleaseError('BAD_CONFIG', `nextId: schema ${r.schema} is named twice; one schema holds one shard.`);
    schemas.set(r.schema, r.shard);
    const other = shards.get(r.shard);
    if (other !== undefined) {
      throw new IdleaseError(
        'BAD_CONFIG',
        `nextId: shard ${r.shard} is given to both ${other} and ${r.schema}; their IDs would collide. Give each schema its own shard id.`,
      );
    }
    shards.set(r.shard, r.schema);
  }
  return resolved;
}

export function nextIdMigrations(engine: Engine, opts: ResolvedNextId): IdleaseMigration[] {
  if (engine.nextId === 'ticker') return mysqlNextIdMigrations(engine, opts);
  const ddl = nextIdDdl(opts);
  const refuseUp = (knex: Knex) => refuseChangedInstall(knex, engine, opts);
  return [
    {
      name: `next_id:${opts.schema}`,
      up: (knex) => runAll(knex, ddl.up),
      async down(knex) {
        await refuseOrDropDependents(knex, opts);
        await runAll(knex, ddl.down);
      },
      refuseUp,
    },
    {
      // Version 2 (issue 12): the shared lock lasts one nextval, not the caller's transaction.
      // Every statement of the DDL is CREATE OR REPLACE / IF NOT EXISTS, so an install made by
      // version 1 is brought to exactly what a fresh install has, and on a fresh install (where
      // the entry above has just run the same DDL) this is a no-op. Down: nothing to undo here,
      // the entry above drops the objects.
      name: `next_id:${opts.schema}:v2`,
      up: (knex) => runAll(knex, ddl.up),
      // Down refuses as the entry above does, so a refused down leaves both entries recorded.
      down: (knex) => refuseOrDropDependents(knex, opts),
    },
  ];
}

/** MariaDB: one logical shard per database (dialects/next-id-mysql.ts), named `next_id`. */
function mysqlNextIdMigrations(engine: Engine, opts: ResolvedNextId): IdleaseMigration[] {
  const install = { shard: opts.shard, layout: opts.layout, gapMs: MYSQL_NEXT_ID_FAILOVER_GAP_MS };
  // The fence moves IDs made off the home server the gap ahead: the time field must hold it.
  const leftMs = 2 ** opts.layout.timeBits - 1 - (Date.now() - opts.layout.epochMs);
  if (leftMs <= 2 * MYSQL_NEXT_ID_FAILOVER_GAP_MS) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `nextId: ${opts.layout.timeBits} time bits from epoch ${new Date(opts.layout.epochMs).toISOString()} leave ${Math.max(0, Math.floor(leftMs / 1000))} s; next_id() on MariaDB needs more than twice its failover gap (${MYSQL_NEXT_ID_FAILOVER_GAP_MS / 1000} s) left. Give more timeBits or a later epoch.`,
    );
  }
  const ddl = mysqlNextIdDdl(install);
  return [
    {
      name: 'next_id',
      async up(knex) {
        const db = knexExecutor(knex);
        await checkMysqlNextIdServer(db);
        await runAll(knex, ddl.up);
        // The first ID carries the current time, not the epoch, even before the first tick.
        await raiseMysqlNextIdSequence(db, install, 0);
      },
      async down(knex) {
        const db = knexExecutor(knex);
        const attached = await mysqlNextIdAttached(db);
        if (attached.length > 0) {
          if (!opts.dropDependentDefaults) throw attachedError(attached.map((a) => `${a.table}.${a.column}`));
          for (const a of attached) await setMysqlColumnDefault(db, a.table, a.column, null);
        }
        await runAll(knex, ddl.down);
      },
      async refuseDown(knex) {
        if (opts.dropDependentDefaults) return;
        const attached = await mysqlNextIdAttached(knexExecutor(knex));
        if (attached.length > 0) throw attachedError(attached.map((a) => `${a.table}.${a.column}`));
      },
      async refuseUp(knex) {
        await checkMysqlNextIdServer(knexExecutor(knex));
        await refuseChangedInstall(knex, engine, opts);
      },
    },
    {
      // Version 2: the fence refuses off home and every promotion jumps once (rehome), instead of
      // one shared +gap off home, which repeated IDs after two failovers in a row. The DDL is
      // IF NOT EXISTS / CREATE OR REPLACE, so this brings a version-1 install to a fresh one's
      // state (a no-op after the entry above); then every attached DEFAULT takes the new form.
      name: 'next_id:v2',
      async up(knex) {
        const db = knexExecutor(knex);
        await runAll(knex, ddl.up);
        const before = await readMysqlNextIdState(db);
        const here = await mysqlServerId(db);
        await rehomeMysqlNextId(db);
        const state = await readMysqlNextIdState(db);
        if (state === undefined) return;
        for (const a of await mysqlNextIdAttached(db)) {
          if (!a.table.includes('.')) await setMysqlColumnDefault(db, a.table, a.column, mysqlNextIdExpression(state));
        }
        // Upgraded off home: version-1 DEFAULTs made IDs a gap ahead of the sequence until the
        // line above rewrote them, past the rehome's jump: jump once more past those.
        if (before !== undefined && before.homeServerId !== here) await raiseMysqlNextIdSequence(db, install, install.gapMs);
      },
      // Down: the entry above drops the objects.
      async down() {},
    },
  ];
}

function attachedError(columns: readonly string[]): IdleaseError {
  const what = `next_id() is still the DEFAULT of ${columns.join(', ')}. Detach those columns first (idlease next-id detach <table> --column <column>), `;
  return new IdleaseError('MIGRATION_FAILED', `${what}or pass dropDependentDefaults: true to drop their defaults with it.`, {
    cli: { message: `${what}or rerun with --drop-dependent-defaults to drop their defaults with it.` },
  });
}

/**
 * An install whose shard or layout differs from what this call asks for. migrate does not
 * change an installed next_id() in place: a new layout or epoch would let new IDs meet old ones
 * (the same bits read another way), so it is refused with the ways that keep old IDs unique.
 */
async function refuseChangedInstall(knex: Knex, engine: Engine, opts: ResolvedNextId): Promise<void> {
  const db = knexExecutor(knex);
  // One shard per database where next_id() is a ticker (MariaDB), per schema where it is a function.
  const perDatabase = engine.nextId === 'ticker';
  const installed = perDatabase ? await readMysqlNextIdState(db) : await readNextIdInstall(db, opts.schema);
  if (installed === undefined) return;
  const a = installed.layout;
  const b = opts.layout;
  const sameLayout =
    a.timeBits === b.timeBits && a.shardBits === b.shardBits && a.sequenceBits === b.sequenceBits && a.epochMs === b.epochMs;
  if (sameLayout && installed.shard === opts.shard) return;
  const where = perDatabase ? 'this database' : `schema ${opts.schema}`;
  const layoutText = (l: IdLayout) => `${l.timeBits}/${l.shardBits}/${l.sequenceBits} bits, epoch ${new Date(l.epochMs).toISOString()}`;
  const flags = (l: IdLayout, shard: number) =>
    `--shard ${shard} --time-bits ${l.timeBits} --shard-bits ${l.shardBits} --sequence-bits ${l.sequenceBits} --epoch ${new Date(l.epochMs).toISOString()}`;
  const schemaFlag = perDatabase ? '' : ` --next-id-schema ${opts.schema}`;
  const have = `next_id() in ${where} is installed with shard ${installed.shard}, layout ${layoutText(a)}; this asks for shard ${opts.shard}, layout ${layoutText(b)}. migrate does not change an installed next_id().`;
  if (sameLayout) {
    // Only the shard differs: IDs with another shard field never equal the old ones, so a
    // reinstall (the sequence restarts at the clock) keeps them unique.
    throw new IdleaseError(
      'MIGRATION_FAILED',
      `${have} To move to shard ${opts.shard} (old IDs stay unique: their shard field differs), reinstall: migrate with direction 'down' and dropDependentDefaults: true, migrate up with shard ${opts.shard}, then attach the tables again.`,
      {
        cli: {
          message:
            `${have} To move to shard ${opts.shard} (old IDs stay unique: their shard field differs), reinstall and attach again: ` +
            `\`{idlease} migrate --no-segments --down --next-id${schemaFlag} --drop-dependent-defaults\` then \`{idlease} migrate --no-segments --next-id${schemaFlag} ${flags(b, opts.shard)}\` then \`{idlease} next-id attach <table>\` for each table.`,
        },
      },
    );
  }
  throw new IdleaseError(
    'MIGRATION_FAILED',
    `${have} A new layout or epoch would read the same bits another way, and new IDs could equal old ones. Keep the installed layout (leave the layout options out, or give ${layoutText(a)}), or install the new layout ${perDatabase ? 'in another database' : 'in another schema'} for new tables.`,
    {
      cli: {
        message: `${have} A new layout or epoch would read the same bits another way, and new IDs could equal old ones. Keep the installed one: \`{idlease} migrate --no-segments --next-id${schemaFlag} ${flags(a, installed.shard)}\`, or install the new layout ${perDatabase ? 'in another database' : 'with another --next-id-schema'} for new tables.`,
      },
    },
  );
}

async function refuseOrDropDependents(knex: Knex, opts: ResolvedNextId): Promise<void> {
  const db = knexExecutor(knex);
  const dependents = await nextIdDependents(db, opts.schema);
  if (dependents.length === 0) return;
  if (!opts.dropDependentDefaults) {
    const what = `${opts.schema}.next_id() is still the DEFAULT of ${dependents.map((d) => `${d.table}.${d.column}`).join(', ')}. Drop or change those defaults first, `;
    throw new IdleaseError(
      'MIGRATION_FAILED',
      `${what}or pass dropDependentDefaults: true (CLI: --drop-dependent-defaults) to drop them with it.`,
      {
        cli: { message: `${what}or rerun with --drop-dependent-defaults to drop them with it.` },
      },
    );
  }
  await dropNextIdDefaults(db, dependents);
}
