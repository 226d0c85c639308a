/**
 * What a new user does first, several at once: 2–8 OS processes on one embedded default
 * directory (`idlease next`, `idlease tag add`, a library user, `idlease serve` stopped with
 * SIGTERM or SIGKILL among them). Every ID printed is counted: none twice, no process hangs,
 * and a process that could not have the directory says so with a typed one-line error.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CLI_BIN, REPO_ROOT } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';

const LIB = path.join(REPO_ROOT, 'test/stress/embedded-lib-worker.ts');
/** Each process waits this long for the directory; a process alive past HANG_MS is a hang. */
const LOCK_WAIT_MS = 30_000;
const HANG_MS = 90_000;

type Kind = 'next' | 'tag-add' | 'lib' | 'serve';

interface Outcome {
  name: string;
  kind: Kind;
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  hung: boolean;
  killedByTest?: NodeJS.Signals;
}

function run(
  name: string,
  kind: Kind,
  args: string[],
  cwd: string,
  control?: (child: ReturnType<typeof spawn>, stdout: () => string) => Promise<NodeJS.Signals | undefined>,
): Promise<Outcome> {
  const argv = kind === 'lib' ? [builtWorker(LIB), ...args] : [CLI_BIN, '--lock-wait', String(LOCK_WAIT_MS / 1000), ...args];
  const child = spawn(process.execPath, argv, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  let hung = false;
  const timer = setTimeout(() => {
    hung = true;
    child.kill('SIGKILL');
  }, HANG_MS);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const killed = control ? control(child, () => stdout) : Promise.resolve(undefined);
  return Promise.all([exited, killed]).then(([{ code, signal }, killedByTest]) => {
    clearTimeout(timer);
    return { name, kind, code, signal, stdout, stderr, hung, ...(killedByTest ? { killedByTest } : {}) };
  });
}

/** serve: once it prints its URL (or gives up), stop it after a while with `signal`. */
function stopServeWith(signal: NodeJS.Signals, afterMs: number) {
  return async (child: ReturnType<typeof spawn>, stdout: () => string): Promise<NodeJS.Signals | undefined> => {
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const deadline = Date.now() + HANG_MS - 5_000;
    while (!stdout().includes('\n') && Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) return undefined;
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, afterMs));
    if (child.exitCode !== null || child.signalCode !== null) return undefined;
    child.kill(signal);
    await exited;
    return signal;
  };
}

function idsOf(o: Outcome): bigint[] {
  return o.stdout
    .split('\n')
    .filter((l) => /^\d+$/.test(l))
    .map(BigInt);
}

/** A process that could not do its job must say why in one typed line. */
function expectTypedFailure(o: Outcome): void {
  const lines = o.stderr.trim().split('\n');
  const last = lines[lines.length - 1] ?? '';
  const typed = o.kind === 'lib' ? /^(DB_LOCKED|DB_UNAVAILABLE): / : /^idlease: (DB_LOCKED|DB_UNAVAILABLE): /;
  expect(last, `${o.name} exited ${o.code}; stderr:\n${o.stderr}`).toMatch(typed);
  expect(o.code, `${o.name}: a typed failure exits 1`).toBe(1);
}

describe('the embedded default, several processes at once', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-embedded-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it(
    'never prints an ID twice, never hangs, and a process that cannot have the directory says so',
    async () => {
      const seen = new Map<string, string>();
      const duplicates: string[] = [];
      let failures = 0;
      let maxSeen = 0n;
      // Sizes 2..8; serve joins from the second round on, stopped by SIGTERM and SIGKILL in turn.
      const rounds = [2, 5, 8, 3, 6, 4];
      for (const [round, size] of rounds.entries()) {
        const plan: Array<() => Promise<Outcome>> = [];
        if (round > 0) {
          const signal: NodeJS.Signals = round % 2 === 0 ? 'SIGKILL' : 'SIGTERM';
          plan.push(() => run(`r${round}-serve`, 'serve', ['serve', '--port', '0'], dir, stopServeWith(signal, 500 + round * 400)));
        }
        for (let i = plan.length; i < size; i++) {
          const n = 1 + ((round * 7 + i * 13) % 40);
          if (i % 4 === 3) plan.push(() => run(`r${round}-tag-${i}`, 'tag-add', ['tag', 'add', `other${i}`], dir));
          else if (i % 4 === 2) plan.push(() => run(`r${round}-lib-${i}`, 'lib', [String(n), String(LOCK_WAIT_MS)], dir));
          else plan.push(() => run(`r${round}-next-${i}`, 'next', ['next', 'order', '-n', String(n)], dir));
        }
        const outcomes = await Promise.all(plan.map((start) => start()));
        for (const o of outcomes) {
          expect(o.hung, `${o.name} was still running after ${HANG_MS} ms; stderr:\n${o.stderr}`).toBe(false);
          if (o.killedByTest) continue;
          if (o.code !== 0) {
            failures++;
            expectTypedFailure(o);
          }
          if (o.kind === 'next' || o.kind === 'lib') {
            for (const id of idsOf(o)) {
              const key = id.toString();
              const first = seen.get(key);
              if (first) duplicates.push(`${key}: ${first} and ${o.name}`);
              else seen.set(key, o.name);
              if (id > maxSeen) maxSeen = id;
            }
          }
        }
        expect(duplicates, `round ${round}: IDs printed twice`).toEqual([]);
      }
      // Whatever was killed, the directory opens again, and what it hands out next is above everything printed.
      const after = await run('after', 'next', ['next', 'order', '-n', '3'], dir);
      expect(after.code, after.stderr).toBe(0);
      const next = idsOf(after);
      expect(next).toHaveLength(3);
      expect(next[0]! > maxSeen, `next ID ${next[0]} must be above the largest printed, ${maxSeen}`).toBe(true);
      expect(seen.size, 'IDs were printed').toBeGreaterThan(100);
      console.log(`embedded concurrency: ${seen.size} IDs over ${rounds.length} rounds, ${failures} typed failures, 0 duplicates`);
    },
    15 * 60_000,
  );
});
