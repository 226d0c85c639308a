/**
 * The database probe behind /readyz: `SELECT 1` on a connection of its own (drivers/knex.ts
 * sideConnection), so it never waits behind leases in the pool and a slow pool does not read as
 * a dead database; on PGlite (one connection) through the executor.
 */
import { probe } from '../dialects/connection-errors.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { sideConnection, type KnexLike } from '../drivers/knex.js';
import { settlesWithin } from '../runtime/deadline.js';
import { SYSTEM_CLOCK } from '../runtime/clock.js';

export function createProber(knex: KnexLike, db: SqlExecutor) {
  const side = sideConnection(knex);
  return {
    async probe(timeoutMs: number): Promise<'ok' | 'late' | { error: unknown }> {
      if (side === undefined) return probe(db, timeoutMs);
      const answer = side.ping().then(
        () => 'ok' as const,
        (error: unknown) => ({ error }),
      );
      return (await settlesWithin(answer, timeoutMs, SYSTEM_CLOCK, true)) ? answer : 'late';
    },
    close: () => side?.close() ?? Promise.resolve(),
  };
}
