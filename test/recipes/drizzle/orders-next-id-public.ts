// The app's Drizzle schema when next_id() is installed in public: its sequence sits beside the
// app's tables, so it is declared here (with the values `idlease migrate --next-id` gives it
// for the default layout) or drizzle-kit plans to drop it.
import { sql } from 'drizzle-orm';
import { bigint, pgSequence, pgTable, text } from 'drizzle-orm/pg-core';

export const idleaseNextIdSeq = pgSequence('idlease_next_id_seq', {
  startWith: 0,
  minValue: 0,
  maxValue: '9007199254740991',
  cache: 4,
  increment: 1,
  cycle: false,
});

export const orders = pgTable('orders', {
  id: bigint('id', { mode: 'bigint' })
    .primaryKey()
    .default(sql`next_id()`),
  note: text('note').notNull(),
});
