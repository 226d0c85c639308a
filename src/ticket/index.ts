export { createTicketAllocator } from './allocator.js';
export type {
  TicketAllocator,
  TicketAllocatorOptions,
  TicketServerOptions,
  TicketServerStatus,
  TicketServerHealth,
  TicketEvent,
  TicketStats,
} from './types.js';
export type { TicketSource, ServerFacts as TicketServerFacts, TicketScheme } from './source.js';
export { reshardTickets, type ReshardOptions, type ReshardResult, type ReshardServer } from './reshard.js';
export type { TicketEngine } from '../dialects/tickets.js';
