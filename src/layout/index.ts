/**
 * Bit layouts for time-ordered IDs: [time | shard | sequence] (or [time | sequence | shard],
 * sonyflake's order), most significant first. Pure: no SQL, no clock except where a caller
 * passes one. The Postgres next_id() built from a layout (src/dialects/next-id.ts) and
 * decodeId() here must agree bit for bit; next_id() only takes millisecond, shard-first layouts.
 *
 * The `shard` field is also the snowflake allocator's worker id: one field, two names, because
 * both say "which issuer made this ID", and an issuer (a next_id() schema or a leased worker id)
 * must be the only one using its value within a layout. Twitter calls it worker, Sony machine.
 */
import { IdleaseError } from '../errors.js';
import { MAX_INT64, unsafeNumberError } from '../ids.js';
import { intOption, rejectUnknownKeys } from '../validate.js';

export interface LayoutOptions {
  /** Bits for milliseconds since `epoch`. Default 41 (69 years). */
  timeBits?: number;
  /** Bits for the logical shard id. Default 10 (shards 0…1023). */
  shardBits?: number;
  /** Bits for the per-millisecond sequence. Default 12 (4,096 IDs per ms before a burst borrows the next ms). */
  sequenceBits?: number;
  /** Start of the time field: a Date, Unix milliseconds, or an ISO-8601 string. Default 2024-01-01T00:00:00Z. */
  epoch?: Date | number | string;
  /** Milliseconds per step of the time field. Default 1; sonyflake counts 10 ms units. */
  timeUnitMs?: number;
  /** Where the shard (worker) field sits. Default 'shard-sequence'; sonyflake puts the machine id last. */
  order?: LayoutOrder;
}

/** Below the time field: shard then sequence (twitter, next_id()), or sequence then shard (sonyflake). */
export type LayoutOrder = 'shard-sequence' | 'sequence-shard';

export interface IdLayout {
  readonly timeBits: number;
  readonly shardBits: number;
  readonly sequenceBits: number;
  /** Unix milliseconds of the epoch. */
  readonly epochMs: number;
  readonly timeUnitMs: number;
  readonly order: LayoutOrder;
}

export const DEFAULT_EPOCH_MS = Date.UTC(2024, 0, 1);

export const DEFAULT_LAYOUT: IdLayout = Object.freeze({
  timeBits: 41,
  shardBits: 10,
  sequenceBits: 12,
  epochMs: DEFAULT_EPOCH_MS,
  timeUnitMs: 1,
  order: 'shard-sequence',
});

/**
 * Named layouts. `idlease` is the default above. `twitter` is Twitter's snowflake (its epoch is
 * its 2010 launch). `sonyflake` is Sony's: 10 ms units, 16-bit machine id last; its default
 * epoch is 2014-09-01 (callers of sonyflake may have set their own: pass `epoch` then).
 */
export const LAYOUT_PRESETS = Object.freeze({
  idlease: DEFAULT_LAYOUT,
  twitter: Object.freeze({
    timeBits: 41,
    shardBits: 10,
    sequenceBits: 12,
    epochMs: Date.parse('2010-11-04T01:42:54.657Z'),
    timeUnitMs: 1,
    order: 'shard-sequence',
  }),
  sonyflake: Object.freeze({
    timeBits: 39,
    shardBits: 16,
    sequenceBits: 8,
    epochMs: Date.UTC(2014, 8, 1),
    timeUnitMs: 10,
    order: 'sequence-shard',
  }),
} satisfies Record<string, IdLayout>);

export type LayoutPreset = keyof typeof LAYOUT_PRESETS;

/** A preset by name, refused with the list of names when unknown. */
export function layoutPreset(name: unknown): IdLayout {
  if (typeof name === 'string' && Object.hasOwn(LAYOUT_PRESETS, name)) return LAYOUT_PRESETS[name as LayoutPreset];
  throw new IdleaseError('BAD_CONFIG', `Unknown layout preset ${JSON.stringify(name)}. Known: ${Object.keys(LAYOUT_PRESETS).join(', ')}.`);
}

/** The sign bit stays clear: an ID is never negative, whatever the time. */
export const MAX_LAYOUT_BITS = 63;

const LAYOUT_KEYS = ['timeBits', 'shardBits', 'sequenceBits', 'epoch', 'epochMs', 'timeUnitMs', 'order'];

// Shard and sequence come back from SQL as integer (int4) and live in JS numbers: 31 bits at most.
function bits(value: unknown, option: string, fallback: number, max: number): number {
  return intOption(value, option, { min: 1, max, default: fallback });
}

/** Unix milliseconds from a Date, a number or an ISO string; refused when unparseable. */
export function parseEpoch(value: unknown, option = 'epoch'): number {
  let ms: number;
  if (value instanceof Date) ms = value.getTime();
  else if (typeof value === 'number') ms = value;
  else if (typeof value === 'string' && /^\d+$/.test(value)) ms = Number(value);
  else if (typeof value === 'string') ms = Date.parse(value);
  else ms = Number.NaN;
  if (!Number.isSafeInteger(ms)) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${option} must be a Date, whole Unix milliseconds or an ISO-8601 date, got ${JSON.stringify(value instanceof Date ? String(value) : value)}. Example: ${option}: '2024-01-01T00:00:00Z'.`,
    );
  }
  return ms;
}

/**
 * Validate a layout and freeze it. `nowMs` is when the layout must already be usable:
 * the epoch may not be in the future (IDs would carry negative times) nor so far back that
 * the time field is already full. `nowMs: null` skips both checks: decoding old IDs with an
 * old layout must still work after its time field ran out.
 */
export function resolveLayout(input: LayoutOptions | IdLayout = {}, nowMs: number | null = Date.now()): IdLayout {
  if (input === null || typeof input !== 'object') {
    throw new IdleaseError('BAD_CONFIG', 'layout must be an object such as { timeBits: 41, shardBits: 10, sequenceBits: 12 }.');
  }
  rejectUnknownKeys(input, LAYOUT_KEYS, 'layout');
  // A day per step is already coarser than any use; the cap keeps unit * field inside a Date.
  const timeUnitMs = intOption(input.timeUnitMs, 'timeUnitMs', { min: 1, max: 86_400_000, default: 1, example: '10 (sonyflake)' });
  const order = input.order ?? 'shard-sequence';
  if (order !== 'shard-sequence' && order !== 'sequence-shard') {
    throw new IdleaseError('BAD_CONFIG', `order must be 'shard-sequence' or 'sequence-shard', got ${JSON.stringify(input.order)}.`);
  }
  const timeBits = bits(input.timeBits, 'timeBits', DEFAULT_LAYOUT.timeBits, 61);
  const shardBits = bits(input.shardBits, 'shardBits', DEFAULT_LAYOUT.shardBits, 31);
  const sequenceBits = bits(input.sequenceBits, 'sequenceBits', DEFAULT_LAYOUT.sequenceBits, 31);
  const total = timeBits + shardBits + sequenceBits;
  if (total > MAX_LAYOUT_BITS) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `timeBits + shardBits + sequenceBits = ${timeBits} + ${shardBits} + ${sequenceBits} = ${total}; at most ${MAX_LAYOUT_BITS} so an ID is never negative. Take bits from one field, e.g. the default 41 + 10 + 12.`,
    );
  }
  const rawEpoch = 'epochMs' in input ? input.epochMs : (input as LayoutOptions).epoch;
  const epochMs = rawEpoch === undefined ? DEFAULT_EPOCH_MS : parseEpoch(rawEpoch);
  if (epochMs < 0) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `epoch ${new Date(epochMs).toISOString()} is before 1970-01-01; choose a recent date, e.g. the day you deploy.`,
    );
  }
  if (nowMs !== null && epochMs > nowMs) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `epoch ${new Date(epochMs).toISOString()} is in the future; IDs would carry negative times. Choose a date in the past, e.g. '2024-01-01T00:00:00Z'.`,
    );
  }
  const layout: IdLayout = Object.freeze({ timeBits, shardBits, sequenceBits, epochMs, timeUnitMs, order });
  const limits = layoutLimits(layout);
  if (nowMs !== null && BigInt(Math.floor((nowMs - epochMs) / timeUnitMs)) > limits.maxTimeMs) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `timeBits ${timeBits} from epoch ${new Date(epochMs).toISOString()} ran out at ${limits.exhaustedAt.toISOString()}; use more timeBits or a later epoch.`,
    );
  }
  return layout;
}

export interface LayoutLimits {
  readonly maxShard: number;
  readonly maxSequence: number;
  /** Largest time field value, in the layout's units (milliseconds unless timeUnitMs says otherwise). */
  readonly maxTimeMs: bigint;
  /** The first instant the time field can no longer hold. */
  readonly exhaustedAt: Date;
  /** Largest ID the layout can produce. */
  readonly maxId: bigint;
}

export function layoutLimits(layout: IdLayout): LayoutLimits {
  const maxTimeMs = (1n << BigInt(layout.timeBits)) - 1n;
  const exhaustedMs = BigInt(layout.epochMs) + (maxTimeMs + 1n) * BigInt(layout.timeUnitMs);
  return Object.freeze({
    maxShard: 2 ** layout.shardBits - 1,
    maxSequence: 2 ** layout.sequenceBits - 1,
    maxTimeMs,
    // Dates end at 8.64e15 ms; beyond that the field outlives any clock.
    exhaustedAt: new Date(exhaustedMs > 8_640_000_000_000_000n ? 8_640_000_000_000_000 : Number(exhaustedMs)),
    maxId: (1n << BigInt(layout.timeBits + layout.shardBits + layout.sequenceBits)) - 1n,
  });
}

/** Refuse a shard id the layout cannot hold. */
export function validateShard(value: unknown, layout: IdLayout, option = 'shard'): number {
  const max = 2 ** layout.shardBits - 1;
  return intOption(value, option, { min: 0, max, unit: `shardBits ${layout.shardBits}` });
}

export interface IdParts {
  /** The raw time field: steps of timeUnitMs since the layout's epoch (milliseconds for the default unit 1). */
  readonly timeMs: bigint;
  readonly shard: number;
  readonly sequence: number;
}

export interface DecodedId extends IdParts {
  readonly id: bigint;
  /** Unix milliseconds: epoch + timeMs × timeUnitMs. */
  readonly unixMs: number;
  readonly timestamp: Date;
}

function toId(value: unknown): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'number' && Number.isInteger(value) && !Number.isSafeInteger(value)) throw unsafeNumberError(value, 'The ID');
  if (typeof value === 'string' && /^-?\d+$/.test(value.trim())) return BigInt(value.trim());
  throw new IdleaseError(
    'BAD_ARGUMENT',
    `An ID must be a bigint or a decimal string, got ${JSON.stringify(typeof value === 'number' ? String(value) : value)} (${typeof value}); IDs pass 2^53, so numbers are refused.`,
  );
}

/** Split an ID into its fields. Accepts a bigint or a decimal string (never a JS number). */
export function decodeId(id: bigint | string, layout: IdLayout = DEFAULT_LAYOUT): DecodedId {
  const value = toId(id);
  const { maxId } = layoutLimits(layout);
  if (value < 0n || value > maxId || value > MAX_INT64) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `ID ${value} is outside 0…${maxId}, the range of a ${layout.timeBits}+${layout.shardBits}+${layout.sequenceBits}-bit layout. Was it made with another layout?`,
    );
  }
  const seqBits = BigInt(layout.sequenceBits);
  const shardBits = BigInt(layout.shardBits);
  const shardFirst = (layout.order ?? 'shard-sequence') === 'shard-sequence';
  const sequence = Number((value >> (shardFirst ? 0n : shardBits)) & ((1n << seqBits) - 1n));
  const shard = Number((value >> (shardFirst ? seqBits : 0n)) & ((1n << shardBits) - 1n));
  const timeMs = value >> (seqBits + shardBits);
  const unix = BigInt(layout.epochMs) + timeMs * BigInt(layout.timeUnitMs ?? 1);
  // Out-of-range Dates become Invalid Date rather than a wrong date.
  const unixMs = unix > 8_640_000_000_000_000n ? Number.NaN : Number(unix);
  return Object.freeze({ id: value, timeMs, shard, sequence, unixMs, timestamp: new Date(unixMs) });
}

/** Build an ID from its fields; every field is range-checked, nothing wraps. */
export function encodeId(parts: IdParts, layout: IdLayout = DEFAULT_LAYOUT): bigint {
  const limits = layoutLimits(layout);
  if (typeof parts.timeMs !== 'bigint' || parts.timeMs < 0n || parts.timeMs > limits.maxTimeMs) {
    throw new IdleaseError('BAD_ARGUMENT', `timeMs must be a bigint from 0 to ${limits.maxTimeMs}, got ${String(parts.timeMs)}.`);
  }
  if (!Number.isInteger(parts.shard) || parts.shard < 0 || parts.shard > limits.maxShard) {
    throw new IdleaseError('BAD_ARGUMENT', `shard must be an integer from 0 to ${limits.maxShard}, got ${String(parts.shard)}.`);
  }
  if (!Number.isInteger(parts.sequence) || parts.sequence < 0 || parts.sequence > limits.maxSequence) {
    throw new IdleaseError('BAD_ARGUMENT', `sequence must be an integer from 0 to ${limits.maxSequence}, got ${String(parts.sequence)}.`);
  }
  const seqBits = BigInt(layout.sequenceBits);
  const shardBits = BigInt(layout.shardBits);
  const low =
    (layout.order ?? 'shard-sequence') === 'shard-sequence'
      ? (BigInt(parts.shard) << seqBits) | BigInt(parts.sequence)
      : (BigInt(parts.sequence) << shardBits) | BigInt(parts.shard);
  return (parts.timeMs << (seqBits + shardBits)) | low;
}

/**
 * next_id() keeps one counter per shard: the sequence value `v` = (timeMs << sequenceBits) | sequence.
 * This maps it to the ID by slotting the shard in between; it is strictly increasing in `v`,
 * which is why IDs of a shard are unique and ordered exactly as the sequence is.
 */
export function idFromCounter(counter: bigint, shard: number, layout: IdLayout = DEFAULT_LAYOUT): bigint {
  const seqBits = BigInt(layout.sequenceBits);
  return encodeId({ timeMs: counter >> seqBits, shard, sequence: Number(counter & ((1n << seqBits) - 1n)) }, layout);
}
