/**
 * Many OS processes on one tag, mixed steps, set-step mid-run, one process SIGKILLed and
 * restarted: every recorded ID is unique and every process's IDs strictly increase.
 *
 * "Mixed steps" with an adaptive policy: each worker pins its own [minStep, maxStep].
 *   tiny   [1, 64]      targetLeaseMs 1 — starts at step 1 (the row starts at 1) and stays small;
 *   small  [7, 700]     targetLeaseMs 5 — step 7 and up;
 *   fixed  [1000, 1000] — the old deploy;
 *   large  [50000, 50000] — the new deploy;
 *   victim default bounds (adaptive from the row's step) — SIGKILLed, then restarted.
 * The row's step goes 1 → 7 → 1000 → 20000 while they run. A step-1-only process cannot do
 * 250k round trips in CI time (each lease is an fsync'd commit), so the small ones adapt upward.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDb } from '../helpers/db.js';
import { REPO_ROOT } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, listTags, setStep } from '../../src/segment/index.js';

const PER_PROCESS = 250_000;
const WORKER = path.join(REPO_ROOT, 'test/stress/segment-worker.ts');

interface Running {
  name: string;
  out: string;
  child: ChildProcess;
  progress: number;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>;
}

function startWorker(name: string, dir: string, cfg: Record<string, unknown>, onProgress: (w: Running) => void): Running {
  const out = path.join(dir, `${name}.bin`);
  const child = spawn(process.execPath, [builtWorker(WORKER), JSON.stringify({ ...cfg, out })], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const w: Running = { name, out, child, progress: 0, exit: undefined as never };
  child.stdout!.on('data', (d: Buffer) => {
    stdout += d.toString();
    const m = /progress (\d+)\n(?![\s\S]*progress)/.exec(stdout.slice(-200));
    if (m) {
      w.progress = Number(m[1]);
      onProgress(w);
    }
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  // 'close': after the pipes are drained ('exit' may come before the last output is read).
  w.exit = new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
  return w;
}

function readIds(file: string): BigInt64Array {
  const b = readFileSync(file);
  return new BigInt64Array(b.buffer, b.byteOffset, Math.floor(b.length / 8));
}

describe.each(['mysql', 'postgres'] as const)('segment stress on %s', (flavor) => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it(`5 processes × ≥${PER_PROCESS} IDs, mixed steps, set-step mid-run, one SIGKILLed and restarted: zero duplicates`, async () => {
    const db = await createTestDb(flavor, 'segstress');
    const dir = mkdtempSync(path.join(tmpdir(), 'idlease-stress-'));
    dirs.push(dir);
    try {
      await migrate(db.knex);
      await addTag(db.knex, { tag: 'stress', step: 1 });
      const base = { url: db.url, tag: 'stress', count: PER_PROCESS };
      const specs: Array<[string, Record<string, unknown>]> = [
        ['tiny', { minStep: 1, maxStep: 64, targetLeaseMs: 1 }],
        ['small', { minStep: 7, maxStep: 700, targetLeaseMs: 5 }],
        ['fixed', { minStep: 1000, maxStep: 1000, targetLeaseMs: 60_000 }],
        ['large', { minStep: 50_000, maxStep: 50_000, targetLeaseMs: 60_000 }],
        ['victim', { minStep: 1, maxStep: 10_000_000, targetLeaseMs: 60_000 }],
      ];
      const stepPlan = [
        [0.15, 7],
        [0.35, 1000],
        [0.6, 20_000],
      ] as const;
      let stepIdx = 0;
      let killed = false;
      let stepChanging = Promise.resolve();
      const workers: Running[] = [];
      const onProgress = (w: Running) => {
        const total = workers.reduce((s, x) => s + x.progress, 0) / (specs.length * PER_PROCESS);
        while (stepIdx < stepPlan.length && total >= stepPlan[stepIdx]![0]) {
          const step = stepPlan[stepIdx++]![1];
          stepChanging = stepChanging.then(() => setStep(db.knex, 'stress', step).then(() => undefined));
        }
        if (!killed && w.name === 'victim' && w.progress >= PER_PROCESS * 0.4) {
          killed = true;
          w.child.kill('SIGKILL');
        }
      };
      for (const [name, cfg] of specs) workers.push(startWorker(name, dir, { ...base, ...cfg }, onProgress));
      const victim = workers[4]!;
      const victimExit = await victim.exit;
      expect(victimExit.signal).toBe('SIGKILL');
      const restarted = startWorker('victim2', dir, { ...base, ...specs[4]![1] }, onProgress);
      workers.push(restarted);
      const results = await Promise.all(workers.filter((w) => w !== victim).map((w) => w.exit));
      await stepChanging;
      for (const r of results) expect(r.code, r.stderr).toBe(0);

      let total = 0;
      const arrays: BigInt64Array[] = [];
      for (const w of workers) {
        const ids = readIds(w.out);
        for (let i = 1; i < ids.length; i++)
          if (!(ids[i]! > ids[i - 1]!)) throw new Error(`${w.name}: ID ${ids[i]} after ${ids[i - 1]} (not increasing)`);
        if (w !== victim) expect(ids.length).toBe(PER_PROCESS);
        arrays.push(ids);
        total += ids.length;
      }
      // The restarted process continues above everything the killed one recorded.
      const v1 = arrays[4]!;
      expect(arrays[5]![0]! > v1[v1.length - 1]!).toBe(true);
      const all = new BigInt64Array(total);
      let off = 0;
      for (const a of arrays) {
        all.set(a, off);
        off += a.length;
      }
      all.sort();
      let dups = 0;
      for (let i = 1; i < all.length; i++) if (all[i] === all[i - 1]) dups++;
      expect(dups).toBe(0);
      expect(total).toBeGreaterThanOrEqual(5 * PER_PROCESS);
      const row = (await listTags(db.knex)).find((r) => r.tag === 'stress')!;
      expect(row.maxId >= all[all.length - 1]!).toBe(true);
      expect(row.step).toBe(20_000);
      const leases = results.map((r) => /done \d+ (\d+)/.exec(r.stdout)?.[1]).map(Number);
      // tiny and small really ran many small leases; large ran only a few.
      expect(leases[0]!).toBeGreaterThan(PER_PROCESS / 64 - 1);
      expect(leases[3]!).toBeLessThanOrEqual(PER_PROCESS / 50_000 + 2);
    } finally {
      await db.drop();
    }
  }, 240_000);
});
