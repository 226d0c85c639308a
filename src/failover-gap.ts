/**
 * The failover gap: how far the first lease or draw on another database instance (a promoted
 * standby, whose copy may lack the old primary's latest writes) jumps past what it finds there.
 * It must exceed what the old primary issued that the new one never received — the IDs leased
 * during the replication lag the HA setup allows, plus the largest step (docs/failover.md).
 */
import { IdleaseError } from './errors.js';
import { unsafeNumberError } from './ids.js';

/** 10^10: a million IDs a second for almost three hours of lag; 10^10 of 9.2 × 10^18 per failover. */
export const DEFAULT_FAILOVER_GAP = 10_000_000_000n;
/** Keeps max_id + 2 × gap inside int8 arithmetic whatever the row holds. */
export const MAX_FAILOVER_GAP = 1_000_000_000_000_000n;

/** A gap from code or the CLI: an integer from 1 to 10^15; undefined → the default. */
export function validateFailoverGap(value: bigint | number | string | undefined, what = 'failoverGap'): bigint {
  if (value === undefined) return DEFAULT_FAILOVER_GAP;
  let gap: bigint | undefined;
  if (typeof value === 'bigint') gap = value;
  else if (typeof value === 'number' && Number.isSafeInteger(value)) gap = BigInt(value);
  else if (typeof value === 'number' && Number.isInteger(value)) throw unsafeNumberError(value, what);
  else if (typeof value === 'string' && /^\d{1,19}$/.test(value)) gap = BigInt(value);
  if (gap === undefined || gap < 1n || gap > MAX_FAILOVER_GAP) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `${what} must be an integer from 1 to ${MAX_FAILOVER_GAP} (10^15), got ${String(value)}. The default, ${DEFAULT_FAILOVER_GAP}, suits most setups (docs/failover.md).`,
    );
  }
  return gap;
}
