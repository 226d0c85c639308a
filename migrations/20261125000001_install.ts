// The install id (idlease_install; PostgreSQL: in schema idlease): one random id that Redis
// sequence keys are bound to, so two databases sharing one Redis never issue from each other's key.
import type { Knex } from 'knex';
import { knexFileMigration } from '../src/migrations/knexfile.js';

const m = knexFileMigration({ install: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (knex: Knex): Promise<void> => m.down(knex);
