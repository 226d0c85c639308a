// Placeholder: the ticket allocator issue fills this in (createTicketAllocator, server set, failover).
export {};
