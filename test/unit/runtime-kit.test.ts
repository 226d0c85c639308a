import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { BACK_OFF, BackgroundTask } from '../../src/runtime/task.js';
import { beforeDeadline, settlesWithin, within, withDeadline } from '../../src/runtime/deadline.js';
import { Emitter } from '../../src/runtime/events.js';
import { wakeableSleep, SYSTEM_CLOCK } from '../../src/runtime/clock.js';
import { createFakeClock } from './fake-clock.js';

const never = () => new Promise<never>(() => undefined);
const BACKOFF = { minMs: 10, maxMs: 80 };

describe('BackgroundTask on a fake clock', () => {
  it('runs a step, sleeps the pause it returns, and runs again', async () => {
    const clock = createFakeClock(0);
    let runs = 0;
    const task = new BackgroundTask({ step: async () => (runs++, 100), backoff: BACKOFF, clock });
    task.start();
    await clock.advance(0);
    expect(runs).toBe(1);
    await clock.advance(99);
    expect(runs).toBe(1);
    await clock.advance(1);
    expect(runs).toBe(2);
    expect(await task.stop(10)).toBe(true);
    expect(task.running).toBe(false);
  });

  it('backs off after a failure (attempts counted, reset by a success), and BACK_OFF backs off with no error', async () => {
    const clock = createFakeClock(0);
    const seen: Array<[number, number]> = [];
    const script = ['fail', 'fail', BACK_OFF, 'ok', 'fail'] as const;
    let i = 0;
    const task = new BackgroundTask({
      step: async () => {
        const r = script[Math.min(i++, script.length - 1)];
        if (r === 'fail') throw new Error('down');
        return r === BACK_OFF ? BACK_OFF : 1_000;
      },
      failed: (_err, attempt, retryInMs) => void seen.push([attempt, retryInMs]),
      backoff: BACKOFF,
      clock,
    });
    task.start();
    await clock.advance(5_000);
    expect(seen.slice(0, 5).map(([a]) => a)).toEqual([1, 2, 1, 2, 3]);
    expect(seen[0]![1]).toBeGreaterThanOrEqual(8);
    expect(seen[0]![1]).toBeLessThanOrEqual(13);
    for (const [, ms] of seen) expect(ms).toBeLessThanOrEqual(BACKOFF.maxMs);
    await task.stop(10);
  });

  it('ends in the same synchronous turn as the wanted() check that says no, and calls ended()', async () => {
    const clock = createFakeClock(0);
    let want = 2;
    const log: string[] = [];
    const task = new BackgroundTask({
      wanted: () => want > 0,
      step: async () => (log.push('step'), want--, 0),
      ended: () => log.push(`ended running=${String(task.running)}`),
      backoff: BACKOFF,
      clock,
    });
    task.start();
    task.start(); // already running: no second loop
    await clock.advance(0);
    expect(log).toEqual(['step', 'step', 'ended running=false']);
    want = 1;
    task.start();
    await clock.advance(0);
    expect(log.filter((l) => l === 'step')).toHaveLength(3);
  });

  it('a failed() that returns false ends the task', async () => {
    const clock = createFakeClock(0);
    let runs = 0;
    const task = new BackgroundTask({
      step: async () => {
        runs++;
        throw new Error('fatal');
      },
      failed: () => false,
      backoff: BACKOFF,
      clock,
    });
    task.start();
    await clock.advance(1_000);
    expect(runs).toBe(1);
    expect(task.running).toBe(false);
  });

  it('property: wake() during a sleep runs the step at once', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 10_000 }), fc.integer({ min: 0, max: 10_000 }), async (pause, after) => {
        const clock = createFakeClock(0);
        let runs = 0;
        const task = new BackgroundTask({ step: async () => (runs++, pause), backoff: BACKOFF, clock });
        task.start();
        await clock.advance(0);
        await clock.advance(Math.min(after, pause - 1));
        expect(runs).toBe(1);
        task.wake();
        await clock.advance(0);
        expect(runs).toBe(2);
        await task.stop(0);
      }),
      { numRuns: 50 },
    );
  });

  it('property: wake() never cuts a backoff short, however often it is called (no retry storm)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 200 }), async (wakes) => {
        const clock = createFakeClock(0);
        let runs = 0;
        const task = new BackgroundTask({
          step: async () => {
            runs++;
            throw new Error('renewal refused');
          },
          backoff: { minMs: 1000, maxMs: 1000 },
          clock,
        });
        task.start();
        await clock.advance(0);
        // A caller per millisecond waking the task (every next() of a fenced snowflake holder does).
        for (let i = 0; i < wakes; i++) {
          task.wake();
          await clock.advance(1);
        }
        const within = runs;
        await task.stop(10);
        // Backoff of ≥ 500 ms (jitter) from the first failure: at most one more round in 200 ms.
        expect(within).toBeLessThanOrEqual(2);
      }),
      { numRuns: 30 },
    );
  });

  it('property: stop() resolves within its bound whatever the step does, and no step starts after it', async () => {
    type Behaviour = 'hang' | 'fail' | 'quick' | 'slow';
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom<Behaviour>('hang', 'fail', 'quick', 'slow'), { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 0, max: 500 }),
        fc.integer({ min: 0, max: 1_000 }),
        async (script, stopAt, bound) => {
          const clock = createFakeClock(0);
          let i = 0;
          let started = 0;
          let stopCalled = false;
          let startedAfterStop = false;
          const task = new BackgroundTask({
            step: async () => {
              started++;
              if (stopCalled) startedAfterStop = true;
              const b = script[i++ % script.length]!;
              if (b === 'hang') return never();
              if (b === 'fail') throw new Error('boom');
              if (b === 'slow') await clock.sleep(50);
              return 20;
            },
            backoff: BACKOFF,
            clock,
          });
          task.start();
          await clock.advance(stopAt);
          stopCalled = true;
          const t0 = clock.mono;
          let resolvedAt: number | undefined;
          void task.stop(bound).then(() => (resolvedAt = clock.mono));
          for (let spent = 0; resolvedAt === undefined && spent <= bound + 1; spent++) await clock.advance(1);
          expect(resolvedAt).toBeDefined();
          expect(resolvedAt! - t0).toBeLessThanOrEqual(bound);
          await clock.advance(2_000);
          expect(startedAfterStop).toBe(false);
          expect(started).toBeGreaterThan(0);
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('deadlines', () => {
  it('withDeadline and within reject a call that never answers, and pass an answer through', async () => {
    await expect(withDeadline(never(), 20)).rejects.toThrow('statement did not answer within 20 ms (statementTimeoutMs)');
    await expect(within(never(), 20, 'server1')).rejects.toThrow('server1 did not answer within 20 ms');
    await expect(withDeadline(Promise.resolve(7), 1_000)).resolves.toBe(7);
    await expect(within(Promise.reject(new Error('no')), 1_000, 's')).rejects.toThrow('no');
  });

  it('beforeDeadline rejects with the caller’s error; settlesWithin says whether it settled and never rejects', async () => {
    await expect(beforeDeadline(never(), 20, () => new Error('late'))).rejects.toThrow('late');
    await expect(beforeDeadline(Promise.resolve('ok'), 1_000, () => new Error('late'))).resolves.toBe('ok');
    expect(await settlesWithin(never(), 20)).toBe(false);
    expect(await settlesWithin(Promise.reject(new Error('x')), 1_000)).toBe(true);
  });

  it('settlesWithin counts its bound on an injected clock', async () => {
    const clock = createFakeClock(0);
    let result: boolean | undefined;
    void settlesWithin(never(), 100, clock).then((r) => (result = r));
    await clock.advance(99);
    expect(result).toBeUndefined();
    await clock.advance(1);
    expect(result).toBe(false);
  });

  it('a woken system-clock sleep ends at once', async () => {
    const s = wakeableSleep(SYSTEM_CLOCK, 60_000);
    s.wake();
    await s.done;
  });
});

describe('Emitter', () => {
  it('calls the option hook first, then listeners; a hook that throws breaks nothing; removal works', () => {
    const seen: string[] = [];
    const e = new Emitter<number>((n) => {
      seen.push(`hook ${n}`);
      throw new Error('broken hook');
    });
    const off = e.add((n) => seen.push(`listener ${n}`));
    e.add(() => {
      throw new Error('also broken');
    });
    expect(() => e.emit(1)).not.toThrow();
    off();
    e.emit(2);
    expect(seen).toEqual(['hook 1', 'listener 1', 'hook 2']);
  });
});
