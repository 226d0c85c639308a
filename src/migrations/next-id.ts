/** Options and migrations for the Postgres next_id(): one schema (logical shard) per entry. */
import type { Knex } from 'knex';
import type { Flavor } from '../dialects/detect.js';
import { dropNextIdDefaults, nextIdDdl, nextIdDependents } from '../dialects/next-id.js';
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

export function nextIdMigrations(flavor: Flavor, opts: ResolvedNextId): IdleaseMigration[] {
  if (flavor === 'mysql') throw new IdleaseError('BAD_CONFIG', 'next_id() is PostgreSQL-only.');
  const ddl = nextIdDdl(opts);
  return [
    {
      name: `next_id:${opts.schema}`,
      up: (knex) => runAll(knex, ddl.up),
      async down(knex) {
        await refuseOrDropDependents(knex, opts);
        await runAll(knex, ddl.down);
      },
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
