// The worker-id lease table for snowflake allocators. Another name or schema:
// migrate(knex, { workers: { table } }) or `idlease migrate --workers --workers-table <name>`.
import type { Knex } from 'knex';
import { knexFileMigration } from '../../src/migrations/knexfile.js';

const m = knexFileMigration({ workers: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (knex: Knex): Promise<void> => m.down(knex);
