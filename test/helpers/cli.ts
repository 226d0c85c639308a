/** Run the idlease CLI as a real OS process: the built bin/idlease.js, as users run it (test/helpers/built-cli.ts keeps dist/ current). */
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** The CLI as the package ships it: bin/idlease.js importing dist/. */
export const CLI_BIN = path.join(REPO_ROOT, 'bin/idlease.js');
/** tsx's loader by absolute URL, so a child whose cwd is a temp dir still finds it. */
export const TSX_LOADER = pathToFileURL(path.join(REPO_ROOT, 'node_modules/tsx/dist/loader.mjs')).href;

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<CliResult> {
  return runNode([CLI_BIN, ...args], options);
}

/**
 * `node <args>` as a real OS process, killed after `timeoutMs` (default 60 s); `wrap` runs it
 * under another command (e.g. GNU time: `['/usr/bin/time', '-f', '%M', '-o', file]`).
 */
export function runNode(
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; wrap?: readonly string[] } = {},
): Promise<CliResult> {
  const [command, ...argv] = [...(options.wrap ?? []), process.execPath, ...args];
  return new Promise((resolve, reject) => {
    const child = spawn(command!, argv, {
      cwd: options.cwd ?? REPO_ROOT,
      env: { ...process.env, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A port on 127.0.0.1 that nothing listens on (taken from the OS, then released). */
export async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

/** A URL with one part changed (the password, the database …). */
export function withUrl(base: string, change: (u: URL) => void): string {
  const u = new URL(base);
  change(u);
  return u.toString();
}
