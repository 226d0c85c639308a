/**
 * Growing (or changing) a ticket server set without repeating an ID.
 *
 * 1. Fence every server, old and new: bump its scheme generation and close it. The fence
 *    waits for draws in flight; after it no allocator can draw there (its draw names the
 *    old generation and inserts nothing).
 * 2. Read the highest ID each server ever issued; the global maximum is their max.
 * 3. On each server of the new set, move the counter to the first ID above the global
 *    maximum in its new residue class, record the new pair, and reopen.
 * Allocators that were drawing wait (bounded by their timeoutMs) while the scheme is
 * closed and then follow the server's new pair.
 */
import type { SqlExecutor } from '../dialects/sql.js';
import { fenceScheme, highestIssued, openScheme, type TicketScheme } from '../dialects/tickets.js';
import type { KnexLike } from '../drivers/index.js';
import { IdleaseError, isIdleaseError } from '../errors.js';
import { MAX_INT64 } from '../ids.js';
import { firstAbove, resolveServerSet } from './config.js';
import { serverHandle } from './options.js';

/** A server reshard works on: a Knex instance or a pool the app has (exactly one). No session state is set. */
export interface ReshardServer {
  readonly knex?: KnexLike;
  readonly pool?: unknown;
  readonly name?: string;
}

export interface ReshardOptions {
  /** The new set: every server with its new offset. */
  readonly servers: ReadonlyArray<ReshardServer & { readonly offset: number }>;
  /** Default: the number of servers. */
  readonly increment?: number;
  /** Servers leaving the set: fenced and left closed, their IDs counted in the maximum. */
  readonly retire?: ReadonlyArray<ReshardServer>;
  readonly sequence?: string;
  readonly schema?: string;
  /**
   * Start this many IDs above the global maximum. After a failover to a replica that may
   * have missed the latest draws, the maximum the servers report is too low: the margin
   * covers what was lost (docs/failover.md). Default 0.
   */
  readonly margin?: bigint | number;
}

export interface ReshardResult {
  /** Highest ID issued anywhere before the reshard. */
  readonly globalMax: bigint;
  readonly increment: number;
  readonly servers: ReadonlyArray<{
    readonly name: string;
    readonly offset: number;
    readonly firstId: bigint;
    readonly generation: bigint;
  }>;
}

export async function reshardTickets(options: ReshardOptions): Promise<ReshardResult> {
  const { increment, sequence, schema } = resolveServerSet(options, 'reshardTickets({ servers: [{ knex, offset }, …], increment })');
  const ref = { schema, sequence };
  const margin = options.margin === undefined ? 0n : BigInt(options.margin);
  if (margin < 0n || margin > MAX_INT64)
    throw new IdleaseError('BAD_ARGUMENT', `reshard: margin must be from 0 to ${MAX_INT64}, got ${String(options.margin)}.`);
  const all = [
    ...options.servers.map((s, i) => ({
      db: serverHandle(s, `servers[${i}]`).db,
      name: s.name ?? `server${s.offset}`,
      offset: s.offset,
      keep: true,
    })),
    ...(options.retire ?? []).map((s, i) => ({
      db: serverHandle(s, `retire[${i}]`).db,
      name: s.name ?? `retired${i + 1}`,
      offset: 0,
      keep: false,
    })),
  ];
  const fenced: Array<{ db: SqlExecutor; before: TicketScheme }> = [];
  let fencing = all[0]!;
  try {
    for (const s of all) {
      fencing = s;
      fenced.push({ db: s.db, before: await fenceScheme(s.db, ref) });
    }
  } catch (err) {
    // Reopen what was fenced, counters untouched: the old scheme is still consistent.
    for (const f of fenced) {
      await openScheme(f.db, ref, {
        increment: f.before.increment,
        offset: f.before.offset,
        first: (await highestIssued(f.db, ref)) + 1n,
      }).catch(() => undefined);
    }
    if (isIdleaseError(err, 'NOT_MIGRATED')) {
      // A server joining the set must be set up first: waiting or retrying will not do it.
      const place = fencing.keep ? ` --tickets-increment ${increment} --tickets-offset ${fencing.offset}` : '';
      const what = `reshard: ${fencing.name} has no ticket objects for sequence "${sequence}"; nothing was changed.`;
      throw new IdleaseError(
        'NOT_MIGRATED',
        `${what} Migrate it first with its place in the new set (migrate(knex, { segments: false, tickets: { sequences: ['${sequence}']${fencing.keep ? `, increment: ${increment}, offset: ${fencing.offset}` : ''} } })), then run reshard again.`,
        {
          cause: err,
          // The CLI names each server by its (redacted) URL: the hint's command reaches that server.
          cli: {
            message: `${what} Migrate it first with its place in the new set: \`{idlease} migrate --no-segments --tickets ${sequence}${place}\`, then run reshard again.`,
            url: fencing.name,
          },
        },
      );
    }
    throw new IdleaseError(
      'DB_UNAVAILABLE',
      `reshard: could not fence every server (${(err as Error).message}); nothing was changed, the fenced servers were reopened. Retry when all servers answer.`,
      { cause: err },
    );
  }
  let globalMax = 0n;
  for (const s of all) {
    const h = await highestIssued(s.db, ref);
    if (h > globalMax) globalMax = h;
  }
  const out: Array<{ name: string; offset: number; firstId: bigint; generation: bigint }> = [];
  for (const s of all) {
    if (!s.keep) continue;
    const firstId = globalMax + margin > MAX_INT64 ? MAX_INT64 + 1n : firstAbove(globalMax + margin, increment, s.offset);
    if (firstId > MAX_INT64) throw new IdleaseError('EXHAUSTED', `reshard: the next ID for ${s.name} (${firstId}) would pass 2^63-1.`);
    const scheme = await openScheme(s.db, ref, { increment, offset: s.offset, first: firstId });
    out.push({ name: s.name, offset: s.offset, firstId, generation: scheme.generation });
  }
  return Object.freeze({ globalMax, increment, servers: Object.freeze(out) });
}
