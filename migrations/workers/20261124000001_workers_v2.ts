// The worker table's instance marker (issue 24), for installs made by 20261123000004_workers
// before it existed: a snowflake claim on a promoted standby waits out one lease by itself.
// Idempotent (it reruns the workers DDL: a worker table still empty is marked, as a fresh one); down leaves the marker in place (20261123000004's down drops both tables).
import type { Knex } from 'knex';
import { knexFileMigration } from '../../src/migrations/knexfile.js';

const m = knexFileMigration({ workers: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (): Promise<void> => Promise.resolve();
