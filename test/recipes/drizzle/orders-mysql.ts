// The app's Drizzle schema on MySQL/MariaDB: IDs come from the segment allocator, not a DEFAULT.
import { bigint, mysqlTable, text } from 'drizzle-orm/mysql-core';

export const orders = mysqlTable('orders', {
  id: bigint('id', { mode: 'bigint' }).primaryKey(),
  note: text('note').notNull(),
});
