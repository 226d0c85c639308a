/**
 * The part of opening PGlite that touches no data directory — reading pglite.wasm and
 * compiling it — started as soon as the CLI knows it will likely need it, so that it overlaps
 * with loading the rest of the CLI and taking the directory's lock. The directory itself is
 * opened later, only under its lock (src/cli/context.ts `withPGlite`). A guess that turns out
 * wrong (`--url` named a server after all) costs only the compile.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';

export interface PGliteArtifacts {
  /** PGlite's option of that name: its WASM, compiled (a WebAssembly.Module). */
  readonly pgliteWasmModule: object;
}

// Node's WebAssembly, which this project's lib setting (ES2022, no DOM) leaves untyped.
const wasmApi = (globalThis as unknown as { WebAssembly: { compile(bytes: Uint8Array): Promise<object> } }).WebAssembly;

let started: Promise<PGliteArtifacts | undefined> | undefined;

/** Start reading and compiling PGlite's WASM (once). */
export function preloadPGlite(): void {
  // A failure here is not an error: PGlite then loads its files itself, as it always can.
  started ??= compile().catch(() => undefined);
}

/** What preloadPGlite() prepared, or undefined when it was not started (or failed). */
export function preloadedPGlite(): Promise<PGliteArtifacts | undefined> {
  return started ?? Promise.resolve(undefined);
}

async function compile(): Promise<PGliteArtifacts> {
  const dist = path.dirname(createRequire(import.meta.url).resolve('@electric-sql/pglite'));
  const wasm = await readFile(path.join(dist, 'pglite.wasm'));
  return { pgliteWasmModule: await wasmApi.compile(wasm) };
}
