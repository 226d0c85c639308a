// The segment table (idlease_segments). Options for other names/schemas: migrate(knex, {...}) or `idlease migrate`.
import type { Knex } from 'knex';
import { knexFileMigration } from '../src/migrations/knexfile.js';

const m = knexFileMigration({ segments: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (knex: Knex): Promise<void> => m.down(knex);
