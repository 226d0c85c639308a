// The app's Drizzle schema when next_id() lives in a schema of its own (`ids`): drizzle-kit,
// looking at public only (its default schemaFilter), sees exactly this table.
import { sql } from 'drizzle-orm';
import { bigint, pgTable, text } from 'drizzle-orm/pg-core';

export const orders = pgTable('orders', {
  // mode 'bigint': IDs pass 2^53; a JS number would round them.
  id: bigint('id', { mode: 'bigint' })
    .primaryKey()
    .default(sql`ids.next_id()`),
  note: text('note').notNull(),
});
