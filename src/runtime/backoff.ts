/**
 * Retry delay after the attempt-th consecutive failure (0-based): doubling from minMs,
 * ±25 % jitter so many clients do not retry in step, never below 1 ms nor above maxMs.
 */
export function backoffMs(attempt: number, minMs: number, maxMs: number, random: () => number = Math.random): number {
  const base = Math.min(maxMs, minMs * 2 ** Math.min(Math.max(attempt, 0), 30));
  return Math.max(1, Math.min(maxMs, Math.round(base * (0.75 + 0.5 * random()))));
}
