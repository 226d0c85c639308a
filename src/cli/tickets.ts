// Placeholder: the ticket allocator issue adds `tickets next|status|reshard` and migrate flags.
import type { Command } from 'commander';
import type { MigrateFlagContributor } from './migrate.js';

export const ticketMigrateFlags: MigrateFlagContributor = {
  configure: () => undefined,
  toOptions: () => ({}),
};

export function registerTicketCommands(_program: Command): void {}
