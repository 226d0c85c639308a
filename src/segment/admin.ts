import {
  insertSegmentRow,
  listSegmentRows,
  raiseSegmentRows,
  readSegmentRow,
  segmentTarget,
  updateFailoverGap,
  updateSegmentStep,
  type SegmentRow,
} from '../dialects/segments.js';
import { typedConnectionErrors } from '../dialects/connection-errors.js';
import { executorFor, type KnexOrPool } from '../drivers/index.js';
import { IdleaseError } from '../errors.js';
import { MAX_INT64, unsafeNumberError } from '../ids.js';
import { shellWord } from '../shell.js';
import { DEFAULT_SEGMENT_TABLE, validateIdentifier } from '../identifiers.js';
import { validateRowStep, validateStart, validateTag } from './options.js';
import { validateFailoverGap } from '../failover-gap.js';

export type { SegmentRow };

export interface TagTableOptions {
  /** Segment table. Default `idlease_segments`. */
  table?: string;
  /** PostgreSQL schema of the table. Default `idlease`, where migrate installs it (`public` for an install kept where idlease 0.1 put it). MySQL: the connection's database. */
  schema?: string;
}

export interface AddTagOptions extends TagTableOptions {
  tag: string;
  /** First ID to hand out. Default 1. */
  start?: bigint | number | string;
  /** The row's admin step: the baseline lease size (see docs/segment.md). Default 1000. */
  step?: number;
  description?: string;
  /**
   * How far the first lease on another database instance (a promoted standby) jumps past the row it
   * finds: more than the IDs the tag leases during the replication lag your HA setup allows, plus
   * the largest step (docs/failover.md). Default 10^10.
   */
  failoverGap?: bigint | number | string;
}

/**
 * Tag admin is SQL-only (a Knex instance or a pool, as the allocators take): it lists and
 * bulk-raises rows, which a store of one tag's operations does not offer. One call, no retry:
 * a connection failure is rethrown typed (BAD_CONFIG for a wrong password/database/host,
 * DB_UNAVAILABLE for a server away).
 */
function target(knexOrPool: KnexOrPool, o: TagTableOptions) {
  const db = executorFor(knexOrPool);
  return segmentTarget(
    { ...db, run: (text, values) => typedConnectionErrors(() => db.run(text, values)) },
    {
      table: validateIdentifier(o.table ?? DEFAULT_SEGMENT_TABLE, 'table'),
      schema: o.schema === undefined ? undefined : validateIdentifier(o.schema, 'schema'),
    },
  );
}

/** Add a tag. Returns the row; `created: false` when it already existed (left unchanged). */
export async function addTag(db: KnexOrPool, options: AddTagOptions): Promise<{ created: boolean; row: SegmentRow }> {
  const t = target(db, options);
  const tag = validateTag(options.tag);
  const start = validateStart(options.start);
  const step = validateRowStep(options.step);
  const description = options.description ?? '';
  if (typeof description !== 'string' || description.length > 256) {
    throw new IdleaseError('BAD_CONFIG', 'description must be a string of at most 256 characters.');
  }
  const failoverGap = validateFailoverGap(options.failoverGap);
  const created = await insertSegmentRow(t, { tag, maxId: start - 1n, step, description, failoverGap });
  const row = await readSegmentRow(t, tag);
  if (!row) throw new IdleaseError('INVARIANT', `Tag ${JSON.stringify(tag)} was inserted but cannot be read back.`);
  return { created, row };
}

export async function listTags(db: KnexOrPool, options: TagTableOptions = {}): Promise<SegmentRow[]> {
  return listSegmentRows(target(db, options));
}

/**
 * Change a tag's admin step. Running allocators read it at their next lease; ranges are
 * always derived from what each lease statement added, so old and new steps never overlap.
 */
export async function setStep(db: KnexOrPool, tag: string, step: number, options: TagTableOptions = {}): Promise<SegmentRow> {
  const t = target(db, options);
  validateTag(tag);
  const s = validateRowStep(step);
  if (!(await updateSegmentStep(t, tag, s))) {
    const flags = `${options.schema !== undefined ? ` --schema ${shellWord(options.schema)}` : ''}${options.table !== undefined && options.table !== DEFAULT_SEGMENT_TABLE ? ` --table ${shellWord(options.table)}` : ''}`;
    throw new IdleaseError(
      'UNKNOWN_TAG',
      `Tag ${JSON.stringify(tag)} does not exist. Add it: \`idlease tag add ${shellWord(tag)} --step ${s}\`.`,
      {
        cli: { message: `Tag ${JSON.stringify(tag)} does not exist. Add it: \`{idlease} tag add ${shellWord(tag)} --step ${s}${flags}\`.` },
      },
    );
  }
  const row = await readSegmentRow(t, tag);
  if (!row) throw new IdleaseError('UNKNOWN_TAG', `Tag ${JSON.stringify(tag)} was removed while its step was being set.`);
  return row;
}

/**
 * Change a tag's failover gap. The next jump (the first lease on a new instance) uses it; rows
 * move only at a lease, so nothing is issued differently before a failover.
 */
export async function setFailoverGap(
  db: KnexOrPool,
  tag: string,
  gap: bigint | number | string,
  options: TagTableOptions = {},
): Promise<SegmentRow> {
  const t = target(db, options);
  validateTag(tag);
  const g = validateFailoverGap(gap);
  if (!(await updateFailoverGap(t, tag, g))) {
    throw new IdleaseError(
      'UNKNOWN_TAG',
      `Tag ${JSON.stringify(tag)} does not exist. Add it: \`idlease tag add ${tag} --failover-gap ${g}\`.`,
    );
  }
  const row = await readSegmentRow(t, tag);
  if (!row) throw new IdleaseError('UNKNOWN_TAG', `Tag ${JSON.stringify(tag)} was removed while its failover gap was being set.`);
  return row;
}

export interface BumpTagOptions extends TagTableOptions {
  /** One tag, or every tag with `all: true`. */
  tag?: string;
  all?: boolean;
  /** Raise max_id by this many IDs … */
  by?: bigint | number | string;
  /** … or to at least this value (never lowers it). */
  to?: bigint | number | string;
}

export interface BumpedTag {
  readonly tag: string;
  readonly before: bigint;
  readonly after: bigint;
}

function positiveBig(value: bigint | number | string, what: string): bigint {
  let v: bigint | undefined;
  if (typeof value === 'bigint') v = value;
  else if (typeof value === 'number' && Number.isSafeInteger(value)) v = BigInt(value);
  else if (typeof value === 'number' && Number.isInteger(value)) throw unsafeNumberError(value, what);
  else if (typeof value === 'string' && /^\d+$/.test(value)) v = BigInt(value);
  if (v === undefined || v < 1n || v > MAX_INT64)
    throw new IdleaseError('BAD_ARGUMENT', `${what} must be an integer from 1 to ${MAX_INT64}, got ${String(value)}.`);
  return v;
}

/**
 * Raise tags' max_id so that no range leased before is leased again: the repair after a
 * failover to a replica that missed recent leases, or a restore from a backup
 * (docs/failover.md). Running allocators move on at their next lease. Never lowers a row.
 */
export async function bumpTag(db: KnexOrPool, options: BumpTagOptions): Promise<BumpedTag[]> {
  const t = target(db, options);
  if ((options.tag === undefined) === (options.all !== true)) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      'bumpTag: give exactly one of `tag` or `all: true` (CLI: `idlease tag bump <tag>` or `idlease tag bump --all`).',
    );
  }
  if ((options.by === undefined) === (options.to === undefined)) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      'bumpTag: give exactly one of `by` (raise by n IDs) or `to` (raise to at least n). CLI: --by <n> | --to <id>.',
    );
  }
  const tag = options.tag === undefined ? undefined : validateTag(options.tag);
  const raise: { by: bigint } | { to: bigint } =
    options.by !== undefined ? { by: positiveBig(options.by, 'by') } : { to: positiveBig(options.to!, 'to') };
  const before = (await listSegmentRows(t)).filter((r) => tag === undefined || r.tag === tag);
  if (tag !== undefined && before.length === 0) {
    throw new IdleaseError('UNKNOWN_TAG', `Tag ${JSON.stringify(tag)} does not exist; nothing to bump. List tags: \`idlease tag list\`.`);
  }
  if ('by' in raise) {
    const full = before.find((r) => r.maxId > MAX_INT64 - raise.by);
    if (full)
      throw new IdleaseError(
        'EXHAUSTED',
        `Tag ${JSON.stringify(full.tag)} (max_id ${full.maxId}) cannot be raised by ${raise.by} without passing 2^63−1; nothing was changed.`,
      );
  }
  await raiseSegmentRows(t, tag, raise);
  const after = new Map((await listSegmentRows(t)).map((r) => [r.tag, r.maxId]));
  return before.map((r) => Object.freeze({ tag: r.tag, before: r.maxId, after: after.get(r.tag) ?? r.maxId }));
}
