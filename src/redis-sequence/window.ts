/**
 * Pure arithmetic of windows and script replies: no Redis, no database, so unit tests cover it.
 * A window is (base, base + size]: the database lease that ended at `end` with step `size`.
 */
import { IdleaseError } from '../errors.js';
import { MAX_INT64 } from '../ids.js';
import { MAX_ROW_STEP } from '../dialects/segments.js';

export interface Window {
  /** Exclusive: the first ID of the window is base + 1. */
  readonly base: bigint;
  readonly size: number;
  readonly end: bigint;
}

/**
 * The window a segment lease of `size` that ended at `end` owns; INVARIANT if it leaves 1 … 2^63−1.
 * Sizes stay within the row step bound (2^31 − 1, maxStep's limit), so offsets in Lua, which
 * are doubles, stay exact.
 */
export function windowOf(end: bigint, size: number, tag: string): Window {
  const base = end - BigInt(size);
  if (base < 0n || end > MAX_INT64 || size < 1 || size > MAX_ROW_STEP) {
    throw new IdleaseError(
      'INVARIANT',
      `A lease for tag ${JSON.stringify(tag)} returned (${base}, ${end}], outside 1…2^63−1; refusing to hand it to Redis.`,
    );
  }
  return { base, size, end };
}

/** What one `next` call answered. `count`: IDs the key issued since it was last reset (every process's calls). */
export type NextReply =
  | { readonly kind: 'ok'; readonly ids: bigint[]; readonly left: number; readonly elected: string | undefined; readonly count: number }
  | { readonly kind: 'stale'; readonly identity: string }
  | { readonly kind: 'foreign'; readonly owner: string };

const DECIMAL = /^(0|[1-9]\d{0,18})$/;
const SMALL = /^(0|[1-9]\d{0,15})$/;

function malformed(reply: readonly string[]): IdleaseError {
  return new IdleaseError(
    'INVARIANT',
    `The Redis sequence script answered ${JSON.stringify(reply)}, which is not a reply it can give; refusing to hand out IDs from it.`,
  );
}

/** IDs from the (base, off, count) triples of a `next` reply, in order, exact: BigInt on the client, never Lua doubles. */
export function parseNextReply(reply: readonly string[]): NextReply {
  if (reply[0] === 'stale' && reply.length === 2) return { kind: 'stale', identity: reply[1]! };
  if (reply[0] === 'foreign' && reply.length === 2) return { kind: 'foreign', owner: reply[1]! };
  if (reply[0] !== 'ok' || reply.length < 4 || (reply.length - 4) % 3 !== 0 || !SMALL.test(reply[1]!) || !SMALL.test(reply[3]!))
    throw malformed(reply);
  const ids: bigint[] = [];
  for (let i = 4; i < reply.length; i += 3) {
    const [b, o, c] = [reply[i]!, reply[i + 1]!, reply[i + 2]!];
    if (!DECIMAL.test(b) || !SMALL.test(o) || !SMALL.test(c)) throw malformed(reply);
    const first = BigInt(b) + BigInt(o) + 1n;
    const count = Number(c);
    if (first + BigInt(count) - 1n > MAX_INT64) throw malformed(reply);
    for (let k = 0; k < count; k++) ids.push(first + BigInt(k));
  }
  return { kind: 'ok', ids, left: Number(reply[1]), elected: reply[2] === '' ? undefined : reply[2], count: Number(reply[3]) };
}

export type InstallReply =
  | { readonly kind: 'current' | 'queued' | 'lost' }
  /** Below the key's high-water mark `hi`; `top` is the highest ID the key issued (0 if none is known). */
  | { readonly kind: 'low'; readonly hi: bigint; readonly top: bigint }
  | { readonly kind: 'stale'; readonly identity: string }
  | { readonly kind: 'foreign'; readonly owner: string };

export function parseInstallReply(reply: readonly string[]): InstallReply {
  const [kind, arg] = reply;
  if ((kind === 'current' || kind === 'queued' || kind === 'lost') && reply.length === 1) return { kind };
  if (kind === 'low' && reply.length === 4 && DECIMAL.test(arg!) && DECIMAL.test(reply[2]!) && SMALL.test(reply[3]!))
    return { kind, hi: BigInt(arg!), top: BigInt(reply[2]!) + BigInt(reply[3]!) };
  if (kind === 'stale' && reply.length === 2) return { kind, identity: arg! };
  if (kind === 'foreign' && reply.length === 2) return { kind, owner: arg! };
  throw malformed(reply);
}

/**
 * A window came back below the key's high-water mark `hi`. Either another caller's later window
 * was installed first (a race: our window ends at or below theirs, and the database, which
 * committed theirs, is at or above `hi`) or the database forgot leases Redis already used (a
 * failover to a replica that missed them, a restore). `maxId` is the row as read afterwards.
 */
export function isRegression(w: Window, hi: bigint, maxId: bigint): boolean {
  // Forward reservation: a healthy database hands out windows either wholly below an earlier
  // one's start or wholly above its end, so a window that straddles `hi` overlaps one Redis used.
  return (w.base < hi && w.end > hi) || maxId < hi;
}
