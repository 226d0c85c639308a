// The `default` ticket sequence: a tickets table (MySQL/MariaDB, InnoDB) or a sequence (Postgres).
// Several servers, engines or names: migrate(knex, { tickets: {...} }) or `idlease migrate --tickets`.
import type { Knex } from 'knex';
import { knexFileMigration } from '../../src/migrations/knexfile.js';

const m = knexFileMigration({ tickets: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (knex: Knex): Promise<void> => m.down(knex);
