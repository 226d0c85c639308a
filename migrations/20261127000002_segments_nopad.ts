// The segment table's tag column NO PAD binary on MySQL/MariaDB (utf8mb4_nopad_bin, MySQL 8's
// utf8mb4_0900_bin), for tables made before it: 'order ' is no longer the row of 'order', as on
// PostgreSQL. Idempotent (it reruns the segments steps, which change only what is missing); a
// no-op on PostgreSQL; down leaves the collation (20261122000001's down drops the table).
import type { Knex } from 'knex';
import { knexFileMigration } from '../src/migrations/knexfile.js';

const m = knexFileMigration({ segments: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (): Promise<void> => Promise.resolve();
