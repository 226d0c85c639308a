// The segment table's `instance` column defaults to the instance a row is inserted on (the lease's
// own instance expression), for tables made by 20261122000001_segments before it: a row added by
// hand, Leaf-style (`INSERT … (tag, max_id, step) VALUES …`), then starts at max_id + 1 instead of
// jumping by its failover gap. Idempotent (it reruns the segments DDL, which sets only what is
// missing); down drops the default and nothing else.
import type { Knex } from 'knex';
import { knexFileMigration } from '../src/migrations/knexfile.js';
import { engineOf } from '../src/dialects/engine.js';
import { knexExecutor } from '../src/drivers/knex.js';
import { planMigrations } from '../src/migrations/migrate.js';

const m = knexFileMigration({ segments: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = async (knex: Knex): Promise<void> => {
  // Only this version's step: the other segment entries' downs would drop the table.
  for (const step of planMigrations(await engineOf(knexExecutor(knex)), { segments: true, install: false }).migrations) {
    if (step.name.endsWith(':v3')) await step.down(knex);
  }
};
