// Placeholder: the ticket allocator issue fills this in (tables per sequence, engine, PG sequences).
import type { Flavor } from '../dialects/detect.js';
import type { IdleaseMigration } from './types.js';

export interface TicketsMigrateOptions {
  /** Sequence names; one tickets table (MySQL) or sequence (Postgres) each. Default ['default']. */
  sequences?: string[];
}

export type ResolvedTickets = Readonly<Required<TicketsMigrateOptions>>;

export function resolveTicketsOptions(input: boolean | TicketsMigrateOptions | undefined): ResolvedTickets | undefined {
  if (input === undefined || input === false) return undefined;
  const opts = input === true ? {} : input;
  return Object.freeze({ sequences: opts.sequences ?? ['default'] });
}

export function ticketsMigrations(_flavor: Flavor, _schema: string | undefined, _opts: ResolvedTickets): IdleaseMigration[] {
  return [];
}
