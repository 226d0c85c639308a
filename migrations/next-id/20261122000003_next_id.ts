// public.next_id() with the default layout and shard 0 (PostgreSQL and PGlite; a no-op on MySQL).
// Other shards, schemas or layouts: migrate(knex, { nextId: {...} }) or `idlease migrate --next-id …`.
import type { Knex } from 'knex';
import { knexFileMigration } from '../../src/migrations/knexfile.js';

const m = knexFileMigration({ nextId: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (knex: Knex): Promise<void> => m.down(knex);
