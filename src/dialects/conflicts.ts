import { SYSTEM_CLOCK } from '../runtime/clock.js';

/**
 * A statement that lost a race and was rolled back whole: an InnoDB deadlock, or on Galera a
 * certification conflict (another node committed the same row first), which also arrives as
 * 1213 — at commit, so even a one-statement write sees it. Such a statement changed nothing,
 * so running it again is safe.
 */
export function isConflict(err: unknown): boolean {
  const e = err as { errno?: unknown; code?: unknown } | null;
  return e?.errno === 1213 || e?.code === '40P01' || e?.code === '40001';
}

/** Conflicts retried inside one call; past that, the caller's own backoff takes over. */
export const CONFLICT_ATTEMPTS = 12;

/**
 * Run `once` again on a conflict, at once after a jittered pause of a few milliseconds, within
 * `timeoutMs` overall (each attempt gets what is left). Handing every loser to an allocator's
 * doubling backoff let one Galera node's processes take nearly every lease (measured: 8× fewer
 * IDs on another node, and calls failing with DB_UNAVAILABLE cause 1213).
 */
export async function retryConflicts<T>(once: (timeoutMs: number | undefined) => Promise<T>, timeoutMs?: number): Promise<T> {
  const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  for (let attempt = 1; ; attempt++) {
    const left = deadline === undefined ? undefined : Math.max(1, deadline - Date.now());
    try {
      return await once(left);
    } catch (err) {
      if (!isConflict(err) || attempt >= CONFLICT_ATTEMPTS || (deadline !== undefined && Date.now() >= deadline)) throw err;
      await SYSTEM_CLOCK.sleep(Math.random() * Math.min(2 ** attempt, 50));
    }
  }
}
