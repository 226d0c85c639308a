// next_id() version 2 (issue 12): replaces the function bodies of public.next_id() installed by
// 20261122000003_next_id (the shared lock now lasts one nextval, not the caller's transaction).
// Idempotent; down leaves the new bodies in place (20261122000003's down drops everything).
import type { Knex } from 'knex';
import { knexFileMigration } from '../../src/migrations/knexfile.js';

const m = knexFileMigration({ nextId: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (): Promise<void> => Promise.resolve();
