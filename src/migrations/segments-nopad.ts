import type { Engine } from '../dialects/engine.js';
import { segmentTagNoPadDdl } from '../dialects/segments-nopad.js';
import { knexExecutor } from '../drivers/knex.js';
import type { ResolvedSegments } from './segments.js';
import { runAll, type IdleaseMigration } from './types.js';

/**
 * Version 3 of the segment table, on an engine whose text collations pad (MariaDB): its tag column NO PAD binary, so that a tag
 * is the same row there as on PostgreSQL ('order ' is not 'order'; dialects/segments-nopad.ts).
 * PostgreSQL and PGlite compare text byte for byte already: nothing to do there. Down leaves the
 * collation (the segments entry's down drops the table).
 */
export function segmentsNoPadMigrations(engine: Engine, schema: string | undefined, opts: ResolvedSegments): IdleaseMigration[] {
  if (!engine.supportsNoPadCollation) return [];
  return [
    {
      name: `segments:${opts.table}:v3-nopad`,
      up: async (knex) => runAll(knex, await segmentTagNoPadDdl(knexExecutor(knex), schema, opts.table)),
      down: () => Promise.resolve(),
    },
  ];
}
