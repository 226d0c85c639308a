/** Ticket allocators' metrics: one table by ticket server, and the allocators' own timeouts. */
import type { TicketAllocator, TicketStats } from '../ticket/types.js';
import { table, type KindMetrics } from './table.js';

type ServerStats = TicketStats['servers'][number];

export const ticketMetrics: KindMetrics<TicketAllocator, undefined> = {
  instruments: () => undefined,
  tables: () => [
    table<TicketAllocator, ServerStats>({
      label: 'server',
      series: (a) => a.stats().servers.map((s) => [s.name, s] as const),
      rows: [
        ['idlease_ticket_ids_served_total', 'IDs handed out per ticket server.', (s) => s.served],
        ['idlease_ticket_server_failures_total', 'Failed draws and probes per ticket server.', (s) => s.failures],
        [
          'idlease_ticket_lock_conflicts_total',
          'Deadlocks and lock-wait timeouts met and retried per ticket server.',
          (s) => s.lockConflicts,
        ],
        [
          'idlease_ticket_server_up',
          '1 when the ticket server is in the rotation, 0 when down or refused.',
          (s) => (s.health === 'up' ? 1 : 0),
        ],
        [
          'idlease_ticket_last_error_timestamp_seconds',
          'When the ticket server last failed (0: never).',
          (s) => (s.lastErrorAt ?? 0) / 1000,
        ],
      ],
    }),
    table<TicketAllocator, TicketStats>({
      series: (a) => [['', a.stats()]],
      rows: [['idlease_ticket_timeouts_total', 'Ticket calls that failed with DB_UNAVAILABLE after timeoutMs.', (s) => s.timeouts]],
    }),
  ],
  watch: () => () => {},
};
