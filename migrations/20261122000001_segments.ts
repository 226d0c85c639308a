// The segment table (idlease_segments; PostgreSQL: in schema idlease). Other names or schemas:
// migrate(knex, {...}) or `idlease migrate`. Beside an install idlease 0.1 left in public it
// refuses and names `idlease migrate`, which moves that install (src/migrations/knexfile.ts).
import type { Knex } from 'knex';
import { knexFileMigration } from '../src/migrations/knexfile.js';

const m = knexFileMigration({ segments: true });
export const up = (knex: Knex): Promise<void> => m.up(knex);
export const down = (knex: Knex): Promise<void> => m.down(knex);
