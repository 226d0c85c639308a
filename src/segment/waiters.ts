/**
 * Callers waiting for IDs while the allocator's memory is empty, served oldest first so
 * that IDs stay increasing in call order. Kept apart from the allocator (as Leaf keeps its
 * SegmentBuffer apart from the policy) so the hot path never touches it.
 */

interface Waiter {
  /** IDs wanted: 1 for next(), n for nextBatch(n). */
  readonly need: number;
  /** What a batch has been given so far (a batch may span segments); null for next(). */
  readonly batch: bigint[] | null;
  readonly resolve: (value: never) => void;
  readonly reject: (err: unknown) => void;
  timer: ReturnType<typeof setTimeout> | undefined;
  done: boolean;
}

export class WaiterQueue {
  private readonly items: Waiter[] = [];
  private head = 0;

  /**
   * Queue a caller. After `timeoutMs` without being served, `onTimeout` decides the error
   * (and may hand back what a batch already holds) and the caller is rejected with it.
   */
  add<T>(
    need: number,
    batch: bigint[] | null,
    timeoutMs: number,
    onTimeout: (batch: bigint[] | null, isHead: boolean) => unknown,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const w: Waiter = { need, batch, resolve: resolve as (v: never) => void, reject, timer: undefined, done: false };
      w.timer = setTimeout(() => {
        if (w.done) return;
        const isHead = this.first() === w;
        w.done = true;
        w.reject(onTimeout(w.batch, isHead));
      }, timeoutMs);
      this.items.push(w);
    });
  }

  isEmpty(): boolean {
    return this.first() === undefined;
  }

  /** IDs the waiting callers still need. */
  demand(): number {
    let d = 0;
    for (let i = this.head; i < this.items.length; i++) {
      const w = this.items[i]!;
      if (!w.done) d += w.batch === null ? 1 : w.need - w.batch.length;
    }
    return d;
  }

  /**
   * Hand out IDs from `from` up to `to` (inclusive) to the waiting callers in order; returns
   * the first ID not handed out. A batch is filled as far as the range allows and stays at
   * the head until it is complete.
   */
  serve(from: bigint, to: bigint): bigint {
    let cursor = from;
    for (let w = this.first(); w !== undefined && cursor <= to; w = this.first()) {
      if (w.batch === null) {
        this.settle(w, cursor++);
        continue;
      }
      const b = w.batch;
      while (b.length < w.need && cursor <= to) b.push(cursor++);
      if (b.length < w.need) break;
      this.settle(w, b);
    }
    return cursor;
  }

  /**
   * Reject every waiting caller with `err`. With `partial` (the tag is exhausted: no ID will ever
   * come) a batch that holds IDs is answered with them instead: they are the tag's last, and
   * rejecting would burn them.
   */
  failAll(err: unknown, partial = false): void {
    for (let i = this.head; i < this.items.length; i++) {
      const w = this.items[i]!;
      if (w.done) continue;
      if (partial && w.batch !== null && w.batch.length > 0) {
        this.settle(w, w.batch);
        continue;
      }
      w.done = true;
      clearTimeout(w.timer);
      w.reject(err);
    }
    this.items.length = 0;
    this.head = 0;
  }

  /** The partial batch of the oldest caller, if it holds one (only the head can). */
  headBatch(): bigint[] | null {
    return this.first()?.batch ?? null;
  }

  private settle(w: Waiter, value: bigint | bigint[]): void {
    w.done = true;
    clearTimeout(w.timer);
    (w.resolve as (v: bigint | bigint[]) => void)(value);
  }

  private first(): Waiter | undefined {
    while (this.head < this.items.length && this.items[this.head]!.done) this.head++;
    if (this.head === this.items.length && this.head > 0) {
      this.items.length = 0;
      this.head = 0;
    }
    return this.items[this.head];
  }
}
