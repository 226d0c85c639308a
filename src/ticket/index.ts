export {
  createTicketAllocator,
  type TicketAllocator,
  type TicketAllocatorOptions,
  type TicketServerOptions,
  type TicketServerStatus,
  type TicketServerHealth,
  type TicketEvent,
  type TicketStats,
} from './allocator.js';
export { reshardTickets, type ReshardOptions, type ReshardResult } from './reshard.js';
export type { ServerFacts as TicketServerFacts, TicketScheme, TicketEngine } from '../dialects/tickets.js';
export type { TicketsMigrateOptions } from '../migrations/tickets.js';
