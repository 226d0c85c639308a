/** Validation and arithmetic for ticket server sets: pure, no I/O. */
import { IdleaseError } from '../errors.js';
import { MAX_INT64 } from '../ids.js';
import { validateIdentifier, validateSequenceName } from '../identifiers.js';
import { intOption } from '../validate.js';

/** MySQL's auto_increment_increment/offset range. */
export const MAX_INCREMENT = 65535;

/**
 * A set of servers is safe when each serves its own residue class: offsets distinct, each
 * in 1..increment, and increment ≥ the number of servers. Anything else can repeat an ID.
 */
export function validateServerSet(offsets: readonly unknown[], incrementOption: unknown): void {
  if (!Array.isArray(offsets) || offsets.length === 0) {
    throw new IdleaseError('BAD_CONFIG', 'servers must be a non-empty array like [{ knex: a, offset: 1 }, { knex: b, offset: 2 }].');
  }
  const increment = intOption(incrementOption, 'increment', { min: 1, max: MAX_INCREMENT, example: Math.max(2, offsets.length) });
  if (increment < offsets.length) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `increment (${increment}) is smaller than the number of servers (${offsets.length}): two servers would share a residue class. Set increment ≥ ${offsets.length}.`,
    );
  }
  const seen = new Map<number, number>();
  offsets.forEach((o, i) => {
    if (typeof o !== 'number' || !Number.isInteger(o) || o < 1 || o > increment) {
      throw new IdleaseError('BAD_CONFIG', `servers[${i}].offset must be an integer 1..increment (${increment}), got ${String(o)}.`);
    }
    const prev = seen.get(o);
    if (prev !== undefined) {
      throw new IdleaseError(
        'BAD_CONFIG',
        `servers[${prev}] and servers[${i}] both have offset ${o}: they would hand out the same IDs. Give every server its own offset 1..${increment}.`,
      );
    }
    seen.set(o, i);
  });
}

/** Does `id` belong to the server with this pair? Offset = increment means residue 0. */
export function belongsTo(id: bigint, increment: number, offset: number): boolean {
  return id > 0n && id % BigInt(increment) === BigInt(offset) % BigInt(increment);
}

/** The smallest ID > floor that the pair can issue. */
export function firstAbove(floor: bigint, increment: number, offset: number): bigint {
  const inc = BigInt(increment);
  const off = BigInt(offset);
  if (floor < off) return off;
  const k = (floor - off) / inc + 1n;
  return off + k * inc;
}

/** Reason an ID from a server must not be handed out, or undefined if it may. */
export function refuseReason(id: bigint, increment: number, offset: number): string | undefined {
  // mysql2 reads the OK packet's insert id as signed: past 2^63-1 it arrives negative.
  if (id > MAX_INT64 || id < 0n)
    return `the counter passed 2^63-1 (got ${id}): it is exhausted (idlease keeps the sign bit clear and never wraps)`;
  if (!belongsTo(id, increment, offset))
    return `ID ${id} is not ≡ ${offset} (mod ${increment}): the server's auto_increment pair is not the one configured`;
  return undefined;
}

/** True when refuseReason refused because the counter ran out. */
export function isExhausted(id: bigint): boolean {
  return id > MAX_INT64 || id < 0n;
}

/** What createTicketAllocator and reshardTickets both take: servers with offsets, and where the sequence lives. */
export interface ServerSetInput {
  readonly servers: ReadonlyArray<{ readonly offset: number } | null | undefined>;
  readonly increment?: number;
  readonly sequence?: string;
  readonly schema?: string;
}

/**
 * Validate a server set (offsets vs increment, default increment = number of servers) and
 * the sequence/schema names; `usage` is the call shape shown when `servers` is missing.
 */
export function resolveServerSet(
  options: ServerSetInput,
  usage: string,
): { increment: number; sequence: string; schema: string | undefined } {
  if (options === null || typeof options !== 'object' || !Array.isArray(options.servers)) {
    throw new IdleaseError('BAD_CONFIG', `${usage}: servers is required.`);
  }
  const increment = options.increment ?? options.servers.length;
  validateServerSet(
    options.servers.map((s) => s?.offset),
    increment,
  );
  return {
    increment,
    sequence: validateSequenceName(options.sequence ?? 'default', 'sequence'),
    schema: options.schema === undefined ? undefined : validateIdentifier(options.schema, 'schema'),
  };
}
