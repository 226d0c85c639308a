// The segment table's failover fence, for tables made by 20261122000001_segments before it: the
// columns instance, failover_gap, jumps and jumped_at, each row marked with the instance this runs on.
// Idempotent (it reruns the segments DDL, which adds only what is missing); down leaves the columns
// (20261122000001's down drops the table).
import type { Knex } from 'knex';
import { knexFileMigration } from '../src/migrations/knexfile.js';

const m = knexFileMigration({ segments: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (): Promise<void> => Promise.resolve();
