/** Helpers for tests that call idlease in this process: the CLI's main() and sync throwers. */
import { vi } from 'vitest';
import { main } from '../../src/cli/main.js';
import { isIdleaseError } from '../../src/errors.js';

/** Run the CLI entry point in-process, capturing what it writes. */
export async function runMain(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const o = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: unknown) => ((out += String(chunk)), true));
  const e = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: unknown) => ((err += String(chunk)), true));
  try {
    return { code: await main(args), out, err };
  } finally {
    o.mockRestore();
    e.mockRestore();
  }
}

/** The IdleaseError code fn throws (undefined: it did not throw). */
export function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return isIdleaseError(err) ? err.code : `not an IdleaseError: ${String(err)}`;
  }
  return undefined;
}
