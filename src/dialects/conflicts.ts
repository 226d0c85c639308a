import { SYSTEM_CLOCK } from '../runtime/clock.js';
import { isConflict } from './driver-errors.js';

export { isConflict };

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
