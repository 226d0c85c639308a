import type { Flavor } from '../dialects/detect.js';
import { segmentTableDdl } from '../dialects/segments.js';
import { validateIdentifier } from '../identifiers.js';
import { runAll, type IdleaseMigration } from './types.js';

export const DEFAULT_SEGMENT_TABLE = 'idlease_segments';

export interface SegmentsMigrateOptions {
  /** Table name. Default `idlease_segments`. */
  table?: string;
}

export interface ResolvedSegments {
  readonly table: string;
}

export function resolveSegmentsOptions(input: boolean | SegmentsMigrateOptions | undefined): ResolvedSegments | undefined {
  if (input === false) return undefined;
  const opts = input === true || input === undefined ? {} : input;
  return Object.freeze({ table: validateIdentifier(opts.table ?? DEFAULT_SEGMENT_TABLE, 'segments.table') });
}

export function segmentsMigrations(flavor: Flavor, schema: string | undefined, opts: ResolvedSegments): IdleaseMigration[] {
  const ddl = segmentTableDdl(flavor, { schema, table: opts.table });
  return [
    {
      name: `segments:${opts.table}`,
      up: (knex) => runAll(knex, ddl.up),
      down: (knex) => runAll(knex, ddl.down),
    },
  ];
}
