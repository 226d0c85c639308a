import type { Knex } from 'knex';
import { IdleaseError } from '../errors.js';

/** One named, reversible step. `up`/`down` receive the migration transaction (or knex). */
export interface IdleaseMigration {
  readonly name: string;
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
  /**
   * Throws when `down` would drop state that guards uniqueness and the caller did not say
   * `dropState`. `down` checks it too; migrate() asks every step first, so a refused rollback
   * of several objects drops none of them.
   */
  refuseDown?(knex: Knex): Promise<void>;
  /** Throws when options of an `up` that is already applied differ from what is installed (migrate does not change them). */
  refuseUp?(knex: Knex): Promise<void>;
}

/**
 * The refusal of a down migration that would lose what keeps IDs unique: what it is, what
 * would be lost (tags and their max_id, a counter, live leases), and the option that drops it.
 */
export function stateLossError(object: string, lost: string): IdleaseError {
  const why = `Refusing to drop ${object}: ${lost}. A later install would start from scratch and hand out those IDs again.`;
  return new IdleaseError(
    'MIGRATION_FAILED',
    `${why} Keep it, or pass dropState: true to migrate() (CLI: --drop-state; knex migration files: IDLEASE_DROP_STATE=1) to drop it anyway.`,
    { cli: { message: `${why} Keep it, or rerun with --drop-state to drop it anyway.` } },
  );
}

/** At most `max` items joined, then how many more. */
export function someOf(items: readonly string[], max = 5): string {
  return items.length <= max ? items.join(', ') : `${items.slice(0, max).join(', ')} and ${items.length - max} more`;
}

/** Run statements one at a time: PGlite's query() takes a single statement. */
export async function runAll(knex: Knex, statements: readonly string[]): Promise<void> {
  for (const sql of statements) await knex.raw(sql);
}
