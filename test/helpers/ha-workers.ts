/**
 * Worker processes for HA tests (test/ha/segment-ha-worker.ts): start them, stop them all
 * with one stop file, read what each recorded, and count duplicates across all of them.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './cli.js';
import { builtWorker } from './built-worker.js';

const WORKER = path.join(REPO_ROOT, 'test/ha/segment-ha-worker.ts');

export interface HaWorkerResult {
  readonly name: string;
  readonly ids: number;
  readonly errors: Record<string, number>;
  /** Database errno (or driver code) behind failed calls. */
  readonly causes: Record<string, number>;
  /** Errno of every failed lease attempt, retried in the background. */
  readonly leaseErrors: Record<string, number>;
  /** IDs drawn when the mark file appeared (markHaWorkers), if it did. */
  readonly idsAtMark: number | undefined;
  readonly untyped: number;
  /** The longest a failed call took, ms (0 when none failed). */
  readonly maxFailMs: number;
  readonly regressions: number;
  readonly leases: number;
  /** Leases that landed first on a new database instance and jumped by the failover gap (stats().failoverJumps). */
  readonly failoverJumps: number;
  readonly file: string;
}

export interface HaWorker {
  readonly name: string;
  readonly child: ChildProcess;
  /** Resolves when the worker has handed out its first ID. */
  readonly serving: Promise<void>;
  readonly done: Promise<HaWorkerResult>;
}

/** How a worker process is started: `spawn` by default; a partition link's `spawn` runs it in a network namespace. */
export type Launch = (command: string, args: readonly string[], options: SpawnOptions) => ChildProcess;

export function startHaWorker(
  name: string,
  dir: string,
  cfg: {
    url: string;
    tag: string;
    maxStep: number;
    waitTimeoutMs?: number;
    statementTimeoutMs?: number;
    connectTimeoutMs?: number;
    pauseMs?: number;
    targetLeaseMs?: number;
    goFile?: string;
  },
  launch: Launch = spawn,
): HaWorker {
  return startHaProcess<Omit<HaWorkerResult, 'name' | 'file'>>(WORKER, name, dir, cfg, launch);
}

/**
 * Any HA worker program (`script`, bundled by builtWorker and run on dist/) that takes its JSON config (with `out`,
 * `stopFile` and `markFile` added) as argv[2], prints `first` once it has an ID and one JSON
 * line at the end: `done` resolves to that line plus its name and ID file.
 */
export function startHaProcess<R extends object>(
  script: string,
  name: string,
  dir: string,
  cfg: object,
  launch: Launch = spawn,
): {
  readonly name: string;
  readonly child: ChildProcess;
  readonly serving: Promise<void>;
  readonly done: Promise<R & { name: string; file: string }>;
} {
  const out = path.join(dir, `${name}.bin`);
  const stopFile = path.join(dir, 'stop');
  const child = launch(
    process.execPath,
    [builtWorker(script), JSON.stringify({ ...cfg, out, stopFile, markFile: path.join(dir, 'mark') })],
    { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  let markServing: () => void = () => undefined;
  const serving = new Promise<void>((r) => (markServing = r));
  child.stdout!.on('data', (d: Buffer) => {
    stdout += d.toString();
    if (stdout.includes('first\n')) markServing();
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = new Promise<R & { name: string; file: string }>((resolve, reject) => {
    // 'close', not 'exit': the child can be gone before its last output is read ('exit' fires
    // with the pipes possibly still open), and its closing JSON line is what this reads. A worker
    // that had exited 0 was once reported as failed, its line still in the pipe, on a loaded machine.
    child.once('close', (code) => {
      markServing();
      const line = stdout.trim().split('\n').at(-1) ?? '';
      if (code !== 0 || !line.startsWith('{')) reject(new Error(`worker ${name} exited ${code}: ${stderr.slice(-2000)}`));
      else resolve({ name, file: out, ...(JSON.parse(line) as R) });
    });
  });
  return { name, child, serving, done };
}

export function stopHaWorkers(dir: string): void {
  writeFileSync(path.join(dir, 'stop'), '');
}

/** Every worker notes how many IDs it has drawn so far (HaWorkerResult.idsAtMark). */
export function markHaWorkers(dir: string): void {
  writeFileSync(path.join(dir, 'mark'), '');
}

export function readIds(file: string): BigInt64Array {
  const b = readFileSync(file);
  return new BigInt64Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length - (b.length % 8)));
}

/** Duplicates across every worker's file, and the workers whose own IDs do not strictly increase. */
export function tally(results: ReadonlyArray<{ readonly name: string; readonly file: string }>): {
  total: number;
  duplicates: number;
  notIncreasing: string[];
} {
  const all: bigint[] = [];
  const notIncreasing: string[] = [];
  for (const r of results) {
    const ids = readIds(r.file);
    for (let i = 1; i < ids.length; i++)
      if (ids[i]! <= ids[i - 1]!) {
        notIncreasing.push(r.name);
        break;
      }
    for (const id of ids) all.push(id);
  }
  all.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  let duplicates = 0;
  for (let i = 1; i < all.length; i++) if (all[i] === all[i - 1]) duplicates++;
  return { total: all.length, duplicates, notIncreasing };
}
