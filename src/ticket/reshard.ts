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
import { fenceScheme, highestIssued, openScheme, readScheme, type TicketRef, type TicketScheme } from '../dialects/tickets.js';
import type { KnexLike } from '../drivers/index.js';
import { IdleaseError, isIdleaseError } from '../errors.js';
import { MAX_INT64 } from '../ids.js';
import { validateIdentifier, validateSequenceName } from '../identifiers.js';
import { firstAbove, MAX_INCREMENT, resolveServerSet } from './config.js';
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
  /**
   * Offsets of the servers' present increment that no server serves (an increment chosen larger
   * than the set, to leave room). A reshard must name every server of the scheme it changes, in
   * `servers` or `retire`, or say here that an offset has none: a server left out would go on
   * drawing under the old pair beside the new one and repeat IDs, so such a reshard is refused.
   */
  readonly vacantOffsets?: readonly number[];
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
    await reopen(fenced, ref);
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
  const left = leftOut(
    all.map((s, i) => ({ ...s, before: fenced[i]!.before })),
    increment,
    vacantOffsets(options.vacantOffsets),
  );
  if (left !== undefined) {
    await reopen(fenced, ref);
    throw left;
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

/** Reopen what was fenced under its old pair, counters untouched: the old scheme is still consistent. */
async function reopen(fenced: ReadonlyArray<{ db: SqlExecutor; before: TicketScheme }>, ref: TicketRef): Promise<void> {
  for (const f of fenced) {
    await openScheme(f.db, ref, {
      increment: f.before.increment,
      offset: f.before.offset,
      first: (await highestIssued(f.db, ref)) + 1n,
    }).catch(() => undefined);
  }
}

function vacantOffsets(given: unknown): ReadonlySet<number> {
  if (given === undefined) return new Set();
  if (!Array.isArray(given) || given.some((o) => typeof o !== 'number' || !Number.isInteger(o) || o < 1 || o > MAX_INCREMENT))
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `reshard: vacantOffsets must be a list of offsets 1..${MAX_INCREMENT}, got ${JSON.stringify(given)}.`,
    );
  return new Set(given as number[]);
}

/**
 * The scheme a reshard changes must be named whole. For every present increment whose servers
 * change pair here, each of its offsets must be served by a server in `servers` or `retire`, or
 * be declared vacant; an offset left out is a server that would go on drawing under the old pair
 * (issue 42: its IDs then repeat the moved servers' new ones). A server whose pair does not change
 * (one migrated into its new place ahead of the reshard) changes no one's scheme. Returns the
 * refusal, or undefined when the reshard may go on.
 */
function leftOut(
  named: ReadonlyArray<{ name: string; offset: number; keep: boolean; before: TicketScheme }>,
  increment: number,
  vacant: ReadonlySet<number>,
): IdleaseError | undefined {
  const changing = named.filter((s) => !s.keep || s.before.increment !== increment || s.before.offset !== s.offset);
  for (const old of [...new Set(changing.map((s) => s.before.increment))].sort((x, y) => x - y)) {
    const served = new Set(named.filter((s) => s.before.increment === old).map((s) => s.before.offset));
    const missing = Array.from({ length: old }, (_, i) => i + 1).filter((o) => !served.has(o) && !vacant.has(o));
    if (missing.length === 0) continue;
    const moving = changing.filter((s) => s.before.increment === old);
    const what = `reshard: ${moving.map((s) => `${s.name} (offset ${s.before.offset} of increment ${old})`).join(', ')} would leave increment ${old}, but no server named here serves ${missing.map((o) => `offset ${o} of increment ${old}`).join(', ')}: a server that does would go on drawing under increment ${old} beside the new scheme and repeat IDs. Nothing was changed.`;
    const offsets = missing.join(',');
    return new IdleaseError(
      'BAD_ARGUMENT',
      `${what} Name every server of the set in servers (in the new offset order); a server leaving the set goes in retire (fenced and left closed, its IDs counted); an offset no server serves goes in vacantOffsets: [${offsets}].`,
      {
        cli: {
          message: `${what} Name every server of the set with --server (in the new offset order); a server leaving the set goes in --retire <url> (fenced and left closed, its IDs counted); an offset no server serves: --vacant-offsets ${offsets}. \`{idlease} tickets status --server <url> …\` shows each server's offset and increment.`,
        },
      },
    );
  }
  return undefined;
}

/** Each server's ticket scheme as it says now (undefined where it did not answer or has none): for hints, no state changed. */
export async function readTicketSchemes(
  servers: ReadonlyArray<ReshardServer>,
  options: { sequence?: string; schema?: string } = {},
): Promise<Array<TicketScheme | undefined>> {
  const ref = {
    sequence: validateSequenceName(options.sequence ?? 'default', 'sequence'),
    schema: options.schema === undefined ? undefined : validateIdentifier(options.schema, 'schema'),
  };
  return Promise.all(servers.map((s, i) => readScheme(serverHandle(s, `servers[${i}]`).db, ref).catch(() => undefined)));
}
