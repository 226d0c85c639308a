import type { Knex } from 'knex';
import { ownObjectName, type Flavor } from '../dialects/detect.js';
import { segmentFencingDdl, segmentInstanceDefaultDdl, segmentRowsIfAny, segmentTableDdl } from '../dialects/segments.js';
import { knexExecutor } from '../drivers/knex.js';
import { DEFAULT_SEGMENT_TABLE, validateIdentifier } from '../identifiers.js';
import { runAll, someOf, stateLossError, type IdleaseMigration } from './types.js';

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

export function segmentsMigrations(
  flavor: Flavor,
  schema: string | undefined,
  opts: ResolvedSegments,
  dropState = false,
): IdleaseMigration[] {
  const ref = { schema, table: opts.table };
  const ddl = segmentTableDdl(flavor, ref);
  // Rows with max_id > 0 have leased IDs: a fresh table would lease them again.
  const refuseDown = async (knex: Knex): Promise<void> => {
    if (dropState) return;
    const issued = (await segmentRowsIfAny(knexExecutor(knex), ref)).filter((r) => r.maxId > 0n);
    if (issued.length === 0) return;
    throw stateLossError(
      `the segment table ${ownObjectName(flavor, schema, opts.table)}`,
      `${issued.length} tag(s) have handed out IDs (${someOf(issued.map((r) => `${r.tag} max_id ${r.maxId}`))})`,
    );
  };
  return [
    {
      name: `segments:${opts.table}`,
      up: (knex) => runAll(knex, ddl.up),
      refuseDown,
      down: async (knex) => {
        await refuseDown(knex);
        await runAll(knex, ddl.down);
      },
    },
    {
      // Version 2: the failover fence (instance, failover_gap, jumps, jumped_at). A fresh table has
      // the columns from the entry above, so this only marks nothing; an older table gets them and
      // its rows are marked with the instance this runs on. Down leaves them (the entry above drops the table).
      name: `segments:${opts.table}:v2`,
      up: (knex) => runAll(knex, segmentFencingDdl(flavor, ref)),
      refuseDown,
      down: (knex) => refuseDown(knex),
    },
    {
      // Version 3: `instance` defaults to the instance the row is inserted on, so a row added by
      // hand starts at max_id + 1 instead of jumping by its gap. Down drops the default only: the
      // rows and their instances stay (a row without one jumps once, which is always safe).
      name: `segments:${opts.table}:v3`,
      up: (knex) => runAll(knex, segmentInstanceDefaultDdl(flavor, ref).up),
      down: (knex) => runAll(knex, segmentInstanceDefaultDdl(flavor, ref).down),
    },
  ];
}
