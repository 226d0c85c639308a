import type { Knex } from 'knex';

/** One named, reversible step. `up`/`down` receive the migration transaction (or knex). */
export interface IdleaseMigration {
  readonly name: string;
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
}

/** Run statements one at a time: PGlite's query() takes a single statement. */
export async function runAll(knex: Knex, statements: readonly string[]): Promise<void> {
  for (const sql of statements) await knex.raw(sql);
}
