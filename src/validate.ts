/**
 * The one home for option checks shared by the allocators' options (segment, ticket, snowflake)
 * and the layout: an integer in a range with its default, a refusal of keys nobody reads, and the
 * "exactly one of knex, pool or store" every allocator asks of its database.
 * Every refusal is a BAD_CONFIG that names the option and shows a value that would be accepted.
 */
import { IdleaseError } from './errors.js';
import { SYSTEM_CLOCK, type Clock } from './runtime/clock.js';

export interface IntOptionRange {
  readonly min: number;
  readonly max: number;
  /** Used when the value is undefined (or null); also the example in the message. */
  readonly default?: number;
  /** Shown after the range, e.g. 'milliseconds'. */
  readonly unit?: string;
  /** A value to show when there is no default (default: the default, else min). */
  readonly example?: number | string;
}

/** `value`, or the default when it is undefined/null; BAD_CONFIG unless an integer in [min, max]. */
export function intOption(value: unknown, name: string, range: IntOptionRange): number {
  const v = value ?? range.default;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < range.min || v > range.max) {
    const span = range.max === Number.MAX_SAFE_INTEGER ? `of at least ${range.min}` : `from ${range.min} to ${range.max}`;
    const unit = range.unit === undefined ? '' : ` (${range.unit})`;
    const example = range.example ?? range.default ?? range.min;
    throw new IdleaseError('BAD_CONFIG', `${name} must be an integer ${span}${unit}, got ${shown(value)}. Example: ${name}: ${example}.`);
  }
  return v;
}

/** A value as a message shows it; never throws (an object without a usable toString, a symbol). */
function shown(value: unknown): string {
  try {
    return typeof value === 'object' && value !== null ? (JSON.stringify(value) ?? 'an object') : String(value);
  } catch {
    return typeof value === 'object' ? 'an object' : typeof value;
  }
}

/** BAD_CONFIG for the first own key of `options` not in `known`, naming the known ones. */
export function rejectUnknownKeys(options: object, known: readonly string[], fnName: string): void {
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      throw new IdleaseError('BAD_CONFIG', `${fnName}: unknown option ${JSON.stringify(key)}. Known options: ${known.join(', ')}.`);
    }
  }
}

/**
 * The key of `keys` that `options` sets (not undefined); BAD_CONFIG unless exactly one is set.
 * `needs` says who needs what, e.g. "createSegmentAllocator needs exactly one of `knex` …"; the
 * message adds how many were given.
 */
export function exactlyOne<K extends string>(options: { readonly [key in K]?: unknown }, keys: readonly K[], needs: string): K {
  const given = keys.filter((k) => options[k] !== undefined);
  if (given.length !== 1) throw new IdleaseError('BAD_CONFIG', `${needs}; got ${given.length}.`);
  return given[0]!;
}

/** An injected clock (tests drive time by hand), or the system clock when none is given. */
export function clockOption(clock: unknown): Clock {
  if (clock === undefined) return SYSTEM_CLOCK;
  const c = clock as Partial<Clock> | null;
  if (
    c === null ||
    typeof c !== 'object' ||
    typeof c.monoMs !== 'function' ||
    typeof c.wallMs !== 'function' ||
    typeof c.sleep !== 'function'
  ) {
    throw new IdleaseError('BAD_CONFIG', 'clock must be { wallMs(), monoMs(), sleep(ms) } (idlease SYSTEM_CLOCK is one).');
  }
  return c as Clock;
}
