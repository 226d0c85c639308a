import { IdleaseError } from '../errors.js';

/**
 * An allocator's event hooks: the `onEvent` option first, then the listeners added later.
 * A broken metrics hook must not break allocation: what a hook throws is swallowed.
 */
export class Emitter<E> {
  private readonly listeners = new Set<(event: E) => void>();

  constructor(private readonly hook?: (event: E) => void) {}

  /**
   * Every allocator's `onEvent(listener)`: returns the function that removes the listener again.
   * A listener that is not a function is refused here, once for every mechanism (BAD_ARGUMENT),
   * rather than failing later inside emit, where it would be swallowed.
   */
  add(listener: (event: E) => void): () => void {
    if (typeof listener !== 'function')
      throw new IdleaseError('BAD_ARGUMENT', 'onEvent(listener): listener must be a function (event) => void.');
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  emit(event: E): void {
    if (this.hook) call(this.hook, event);
    for (const listener of this.listeners) call(listener, event);
  }
}

function call<E>(listener: (event: E) => void, event: E): void {
  try {
    listener(event);
  } catch {
    // A broken metrics hook must not break allocation.
  }
}
