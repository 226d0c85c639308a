/** Operator repairs for an installed next_id(); SQL in dialects/next-id.ts. */
import { declaredEngine } from '../dialects/engine.js';
import { typedConnectionErrors } from '../dialects/connection-errors.js';
import { bumpNextIdSequence, type NextIdBumpResult } from '../dialects/next-id.js';
import { executorFor, type KnexOrPool } from '../drivers/index.js';
import { IdleaseError } from '../errors.js';
import { validateIdentifier } from '../identifiers.js';

export type { NextIdBumpResult };

export interface BumpNextIdOptions {
  /** Schema next_id() was installed in (default `public`). */
  readonly schema?: string;
  /** New IDs start at least this many ms ahead of the database clock. */
  readonly aheadMs: number;
}

/** A day: far beyond any burst lead, short enough that a typo cannot push IDs years ahead. */
const MAX_AHEAD_MS = 86_400_000;

/**
 * After a failover that may have lost next_id() draws which ran ahead of the clock (a burst
 * of more than 2^sequenceBits IDs in a millisecond), raise the sequence so that new IDs start
 * `aheadMs` past the database clock. Run it before traffic reaches the promoted server.
 * Never lowers the sequence; new IDs' time fields run ahead by up to `aheadMs` until the
 * clock catches up. `db` is a Knex instance or a pool (pg.Pool or Client, postgres.js); the
 * bump is one transaction on one of its connections.
 */
export async function bumpNextId(db: KnexOrPool, options: BumpNextIdOptions): Promise<NextIdBumpResult> {
  const exec = executorFor(db);
  if (declaredEngine(exec).nextId !== 'function') {
    throw new IdleaseError(
      'BAD_CONFIG',
      'bumpNextId applies to PostgreSQL and PGlite; this database is MySQL/MariaDB, where a promoted server is made home by its ticker or by next-id attach, which jumps its sequence past what the old primary can have issued (docs/next-id.md).',
    );
  }
  const schema = validateIdentifier(options.schema ?? 'public', 'schema');
  const ahead = options.aheadMs;
  if (!Number.isSafeInteger(ahead) || ahead < 0 || ahead > MAX_AHEAD_MS) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `aheadMs must be an integer from 0 to ${MAX_AHEAD_MS} (a day), got ${String(ahead)}. Use the largest burst lead you expect (docs/failover.md); CLI: --ahead-ms <ms>.`,
    );
  }
  return typedConnectionErrors(() => bumpNextIdSequence(exec, schema, ahead));
}
