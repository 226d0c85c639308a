// Placeholder: the next_id() issue adds `decode <id>` and `migrate --next-id …` flags.
import type { Command } from 'commander';
import type { MigrateFlagContributor } from './migrate.js';

export const nextIdMigrateFlags: MigrateFlagContributor = {
  configure: () => undefined,
  toOptions: () => ({}),
};

export function registerNextIdCommands(_program: Command): void {}
