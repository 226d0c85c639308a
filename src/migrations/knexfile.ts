import type { Knex } from 'knex';
import { flavorOf } from '../dialects/detect.js';
import { planMigrations, type MigrateOptions } from './migrate.js';

/**
 * Adapts the in-code migrations to knex migration files: each file names the objects it
 * installs, and the same builders run as in migrate() and `idlease migrate`. Objects a
 * flavor does not have (next_id() on MySQL) are a no-op there.
 */
export function knexFileMigration(options: Omit<MigrateOptions, 'direction' | 'lockTimeoutMs' | 'migrationsTable'>): {
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
} {
  const plan = (knex: Knex) => {
    const flavor = flavorOf(knex);
    const { nextId, ...rest } = options;
    return planMigrations(flavor, { segments: false, ...rest, ...(flavor === 'mysql' ? {} : { nextId }) }).migrations;
  };
  return {
    async up(knex) {
      for (const m of plan(knex)) await m.up(knex);
    },
    async down(knex) {
      for (const m of [...plan(knex)].reverse()) await m.down(knex);
    },
  };
}
