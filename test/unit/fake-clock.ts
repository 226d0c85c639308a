/** A hand-driven clock for allocators under test: wall and monotonic time move only when a test says so. */
import type { SnowflakeClock } from '../../src/snowflake/options.js';

export interface FakeClock extends SnowflakeClock {
  wall: number;
  mono: number;
  /** Let `ms` pass: both clocks move, timers that come due fire in order, each followed by a turn of the event loop. */
  advance(ms: number): Promise<void>;
  /** A pause (SIGSTOP, GC, VM freeze): time jumps, no timer fires during it. */
  jump(ms: number): void;
  /** Let `promise` settle, advancing time a step at a time; fails after `maxMs` of fake time. */
  settle<T>(promise: Promise<T>, maxMs?: number, stepMs?: number): Promise<T>;
}

const turn = () => new Promise<void>((r) => setImmediate(r));

export function createFakeClock(startWall: number): FakeClock {
  let timers: Array<{ at: number; fire: () => void }> = [];
  const clock: FakeClock = {
    wall: startWall,
    mono: 1_000,
    wallMs: () => clock.wall,
    monoMs: () => clock.mono,
    sleep: (ms) => new Promise<void>((resolve) => timers.push({ at: clock.mono + ms, fire: resolve })),
    async advance(ms) {
      const end = clock.mono + ms;
      await turn();
      for (;;) {
        timers.sort((a, b) => a.at - b.at);
        const t = timers[0];
        if (!t || t.at > end) break;
        timers = timers.slice(1);
        clock.wall += t.at - clock.mono;
        clock.mono = t.at;
        t.fire();
        await turn();
      }
      clock.wall += end - clock.mono;
      clock.mono = end;
      await turn();
    },
    jump(ms) {
      clock.wall += ms;
      clock.mono += ms;
    },
    async settle(promise, maxMs = 120_000, stepMs = 1) {
      let done = false;
      const watched = promise.finally(() => (done = true));
      watched.catch(() => undefined);
      for (let spent = 0; !done && spent < maxMs; spent += stepMs) await clock.advance(stepMs);
      if (!done) throw new Error(`did not settle within ${maxMs} ms of fake time`);
      return watched;
    },
  };
  return clock;
}
