// The ticket scheme row's failover fence, for servers migrated by 20261122000002_tickets before it:
// the columns instance, failover_gap, jumps and jumped_at, the counter marked with the instance this
// runs on. Idempotent; down leaves the columns (20261122000002's down drops the ticket objects).
import type { Knex } from 'knex';
import { knexFileMigration } from '../../src/migrations/knexfile.js';

const m = knexFileMigration({ tickets: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (): Promise<void> => Promise.resolve();
