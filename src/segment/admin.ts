import type { Knex } from 'knex';
import { flavorOf } from '../dialects/detect.js';
import { insertSegmentRow, listSegmentRows, readSegmentRow, updateSegmentStep, type SegmentRow } from '../dialects/segments.js';
import { IdleaseError } from '../errors.js';
import { validateIdentifier } from '../identifiers.js';
import { DEFAULT_SEGMENT_TABLE } from '../migrations/segments.js';
import { validateRowStep, validateStart, validateTag } from './options.js';

export type { SegmentRow };

export interface TagTableOptions {
  /** Segment table. Default `idlease_segments`. */
  table?: string;
  /** PostgreSQL schema of the table. */
  schema?: string;
}

export interface AddTagOptions extends TagTableOptions {
  tag: string;
  /** First ID to hand out. Default 1. */
  start?: bigint | number | string;
  /** The row's admin step: the baseline lease size (see docs/segment.md). Default 1000. */
  step?: number;
  description?: string;
}

function target(knex: Knex, o: TagTableOptions) {
  return Object.freeze({
    flavor: flavorOf(knex),
    ref: {
      table: validateIdentifier(o.table ?? DEFAULT_SEGMENT_TABLE, 'table'),
      schema: o.schema === undefined ? undefined : validateIdentifier(o.schema, 'schema'),
    },
  });
}

/** Add a tag. Returns the row; `created: false` when it already existed (left unchanged). */
export async function addTag(knex: Knex, options: AddTagOptions): Promise<{ created: boolean; row: SegmentRow }> {
  const t = target(knex, options);
  const tag = validateTag(options.tag);
  const start = validateStart(options.start);
  const step = validateRowStep(options.step);
  const description = options.description ?? '';
  if (typeof description !== 'string' || description.length > 256) {
    throw new IdleaseError('BAD_CONFIG', 'description must be a string of at most 256 characters.');
  }
  const created = await insertSegmentRow(knex, t, { tag, maxId: start - 1n, step, description });
  const row = await readSegmentRow(knex, t, tag);
  if (!row) throw new IdleaseError('INVARIANT', `Tag ${JSON.stringify(tag)} was inserted but cannot be read back.`);
  return { created, row };
}

export async function listTags(knex: Knex, options: TagTableOptions = {}): Promise<SegmentRow[]> {
  return listSegmentRows(knex, target(knex, options));
}

/**
 * Change a tag's admin step. Running allocators read it at their next lease; ranges are
 * always derived from what each lease statement added, so old and new steps never overlap.
 */
export async function setStep(knex: Knex, tag: string, step: number, options: TagTableOptions = {}): Promise<SegmentRow> {
  const t = target(knex, options);
  validateTag(tag);
  const s = validateRowStep(step);
  if (!(await updateSegmentStep(knex, t, tag, s))) {
    throw new IdleaseError('UNKNOWN_TAG', `Tag ${JSON.stringify(tag)} does not exist. Add it: \`idlease tag add ${tag} --step ${s}\`.`);
  }
  const row = await readSegmentRow(knex, t, tag);
  if (!row) throw new IdleaseError('UNKNOWN_TAG', `Tag ${JSON.stringify(tag)} was removed while its step was being set.`);
  return row;
}
