/** Helpers for tests that call idlease in this process: the CLI's main() and sync throwers. */
import { AsyncLocalStorage } from 'node:async_hooks';
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

const captured = new AsyncLocalStorage<{ out: string; err: string }>();
let routing = 0;
let restore: (() => void) | undefined;

/**
 * runMain for calls that run at once in this process (it.concurrent): what each call writes is
 * routed by AsyncLocalStorage to its own buffers, so concurrent runs do not mix their output.
 * Writes from outside any call go where they always went.
 */
export async function runMainIsolated(args: string[]): Promise<{ code: number; out: string; err: string; ms: number }> {
  if (routing++ === 0) {
    const write = (stream: NodeJS.WriteStream, key: 'out' | 'err') => {
      const original = stream.write.bind(stream) as (...a: unknown[]) => boolean;
      const spy = vi.spyOn(stream, 'write').mockImplementation(((chunk: unknown, ...rest: unknown[]) => {
        const store = captured.getStore();
        if (store === undefined) return original(chunk, ...rest);
        store[key] += String(chunk);
        return true;
      }) as typeof stream.write);
      return () => spy.mockRestore();
    };
    const undo = [write(process.stdout, 'out'), write(process.stderr, 'err')];
    restore = () => undo.forEach((u) => u());
  }
  const store = { out: '', err: '' };
  const started = Date.now();
  try {
    const code = await captured.run(store, () => main(args));
    return { code, out: store.out, err: store.err, ms: Date.now() - started };
  } finally {
    if (--routing === 0) restore?.();
  }
}
