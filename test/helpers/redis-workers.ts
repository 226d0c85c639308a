/**
 * OS worker processes for the Redis sequence tests (test/redis/redis-worker.ts), every ID
 * recorded to a file and counted afterwards.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './cli.js';
import { builtWorker } from './built-worker.js';
import { waitFor } from './wait.js';

const WORKER = path.join(REPO_ROOT, 'test/redis/redis-worker.ts');

export interface RedisWorker {
  readonly name: string;
  readonly out: string;
  readonly child: ChildProcess;
  progress: number;
  readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>;
}

export interface WorkerSummary {
  done: number;
  errors: Record<string, number>;
  windows: number;
  reseeds: number;
  lostWindows: number;
  givenBack: string;
  calls: number;
  /** The longest next()/nextBatch() call, from its start to its answer or error. */
  maxCallMs: number;
}

/** `spawner`: how to start the process (default here; a partition link's `spawn` runs it in its namespace). */
export function startRedisWorker(
  name: string,
  dir: string,
  cfg: Record<string, unknown>,
  spawner: (command: string, args: readonly string[], options: SpawnOptions) => ChildProcess = spawn,
): RedisWorker {
  const out = path.join(dir, `${name}.bin`);
  const child = spawner(process.execPath, [builtWorker(WORKER), JSON.stringify({ ...cfg, out })], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const w = { name, out, child, progress: 0 } as RedisWorker;
  child.stdout!.on('data', (d: Buffer) => {
    stdout += d.toString();
    const m = /progress (\d+)\n(?![\s\S]*progress)/.exec(stdout.slice(-200));
    if (m) w.progress = Number(m[1]);
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  (w as { exit: RedisWorker['exit'] }).exit = new Promise((resolve) =>
    // 'close': after the pipes are drained, so the summary line the worker printed last is in stdout.
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr })),
  );
  return w;
}

export async function summaryOf(w: RedisWorker): Promise<WorkerSummary> {
  const r = await w.exit;
  if (process.env.IDLEASE_WORKER_ERRORS && r.stderr) console.log(`${w.name}: ${r.stderr}`);
  const line = /summary (.*)\n/.exec(r.stdout);
  if (r.code !== 0 || !line) throw new Error(`worker ${w.name} exited ${r.code ?? r.signal}: ${r.stderr.slice(-2000)}`);
  return JSON.parse(line[1]!) as WorkerSummary;
}

export function readIds(file: string): BigInt64Array {
  const b = readFileSync(file);
  return new BigInt64Array(b.buffer.slice(b.byteOffset, b.byteOffset + Math.floor(b.length / 8) * 8));
}

/** Every recorded ID across `files`: how many, how many repeated, and each file's IDs strictly increasing or not. */
export function countIds(files: readonly string[]): { total: number; duplicates: number; unordered: number } {
  const all: bigint[] = [];
  let unordered = 0;
  for (const f of files) {
    const ids = readIds(f);
    for (let i = 0; i < ids.length; i++) {
      if (i > 0 && ids[i]! <= ids[i - 1]!) unordered++;
      all.push(ids[i]!);
    }
  }
  all.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  let duplicates = 0;
  for (let i = 1; i < all.length; i++) if (all[i] === all[i - 1]) duplicates++;
  return { total: all.length, duplicates, unordered };
}

/** Until every worker still running has drawn `atLeast` IDs. */
export async function untilProgress(workers: readonly RedisWorker[], atLeast: number, timeoutMs = 60_000): Promise<void> {
  await waitFor(() => !workers.some((w) => w.progress < atLeast && w.child.exitCode === null), {
    timeoutMs,
    intervalMs: 20,
    what: () => `the workers to reach ${atLeast} IDs: ${workers.map((w) => `${w.name}=${w.progress}`).join(', ')}`,
  });
}
