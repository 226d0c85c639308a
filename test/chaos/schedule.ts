/**
 * The fault schedule of a chaos run, a function of its seed alone (the same seed twice draws the
 * same faults at the same offsets, in the same order, on the same targets): so a run that finds a
 * repeat can be run again. Pure: no clock, no I/O.
 */

export const FAULT_KINDS = [
  'kill-worker', // SIGKILL a worker process; a new one of its kind starts
  'pause-worker', // SIGSTOP a worker past its lease, then SIGCONT
  'kill-server', // SIGKILL a database server, restarted after a moment
  'freeze-server', // SIGSTOP the MariaDB server for seconds, then SIGCONT
  'redis-flush', // FLUSHALL: Redis loses every key
  'redis-restart', // SIGKILL redis-server (no persistence) and start it again
  'set-step', // an admin command beside the allocators: the tag's step changed
  'bump', // an admin command: the tag's row bumped past what was leased
  'clock-shift', // a snowflake worker restarted with its wall clock ±3 s off, stepped back later
  'cut-link', // the workers' link to PostgreSQL or MariaDB cut silently for seconds, then healed
  // Two promotions in a row, each losing the old primary's last writes, before anyone acts:
  'failover-pg', // the standby promoted, then the standby rebuilt from it promoted in turn
  'failover-mariadb', // a replica promoted, then another one or the old primary rejoined (a fail-back)
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Fault {
  /** Offset from the start of the run, ms. */
  readonly atMs: number;
  readonly kind: FaultKind;
  /** Which of the candidates the fault hits (the runner reads it modulo their number). */
  readonly pick: number;
  /** How long it lasts (pause, freeze, down time), ms. */
  readonly forMs: number;
}

/** xorshift32: small, fast, and the same on every platform. */
export function seededRandom(seed: number): () => number {
  let s = seed >>> 0 || 0x9e3779b9;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
}

/**
 * Faults every 2–4.5 s from 4 s in until 8 s before the end (the end is left for recovery, so
 * the checker can see every mechanism issuing again). Every kind comes up at least once in a run
 * long enough for as many faults, in an order the seed shuffles.
 */
export function scheduleFor(seed: number, seconds: number): Fault[] {
  const random = seededRandom(seed);
  const faults: Fault[] = [];
  const endMs = seconds * 1000 - 8_000;
  let kinds: FaultKind[] = [];
  for (let at = 4_000; at < endMs; at += 2_000 + Math.floor(random() * 2_500)) {
    if (kinds.length === 0) {
      kinds = [...FAULT_KINDS];
      for (let i = kinds.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [kinds[i], kinds[j]] = [kinds[j]!, kinds[i]!];
      }
    }
    faults.push({ atMs: at, kind: kinds.pop()!, pick: Math.floor(random() * 1_000_000), forMs: 1_000 + Math.floor(random() * 3_000) });
  }
  return faults;
}
