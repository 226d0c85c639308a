/**
 * Runs one docs block as a user would: TypeScript stripped of its types in a project whose `idlease`
 * is this checkout, shell with `idlease` (and `npx idlease`) on PATH, SQL with psql, the
 * mysql client or PGlite. Each run gets a context: a temp project directory and fresh
 * databases, named to the block through environment variables (see CONTRIBUTING.md,
 * "Docs samples").
 */
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { transformSync } from 'esbuild';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { CLI_BIN, REPO_ROOT, TSX_LOADER } from '../helpers/cli.js';
import { recipeModule, recipeTools } from '../helpers/recipe-tools.js';
import type { DocBlock, Flavor } from './extract.js';
import { startRedis } from '../helpers/redis.js';

export type Target = Flavor | 'none';

/**
 * Fresh databases a block may name besides DATABASE_URL: MariaDB ones (MYSQL_URL, ticket
 * servers DB1_URL, DB2_URL, …, the knexfile's IDLEASE_MYSQL_URL) and PostgreSQL ones
 * (PG_URL, IDLEASE_PG_URL).
 */
const EXTRA_DB = /\b(MYSQL_URL|PG_URL|DB\d+_URL|IDLEASE_MYSQL_URL|IDLEASE_PG_URL)\b/g;
/** A block that names REDIS_URL gets a private redis-server of its own (never the shared 6379). */
const REDIS_URL = /\bREDIS_URL\b/;
export const RUN_TIMEOUT_MS = 45_000;
/** An import of a module beside the block (`./generated/prisma/client.ts`), not of a package. */
const LOCAL_IMPORT = /\bfrom\s+['"]\.\.?\//;

export interface Context {
  readonly target: Target;
  /** The project directory: where ts/sh blocks run, unless the block is marked `checkout`. */
  readonly dir: string;
  readonly env: Record<string, string>;
  readonly dbs: TestDb[];
  /** Other servers started for the block, stopped with it. */
  readonly stops: Array<() => Promise<void>>;
}

let modulesDir: string | undefined;

/**
 * Legacy decorators, as every TypeORM project compiles them (its decorators predate the
 * standard ones); tsx reads the option from here. Nothing else in the samples uses decorators.
 */
export const SAMPLE_COMPILER_OPTIONS = { experimentalDecorators: true };

/**
 * node_modules as `npm install idlease` would leave it: the package (this checkout's built
 * dist/ under the published exports), its dependencies beside it, and .bin/idlease (the built
 * CLI, bin/idlease.js).
 */
function sharedModules(): string {
  if (modulesDir) return modulesDir;
  const root = mkdtempSync(path.join(tmpdir(), 'idlease-docs-modules-'));
  const nm = path.join(root, 'node_modules');
  const pkgDir = path.join(nm, 'idlease');
  mkdirSync(path.join(pkgDir, 'bin'), { recursive: true });
  mkdirSync(path.join(nm, '.bin'));
  // The built dist/ (the database projects' global setup keeps it current) under the package's
  // own exports and types, as the published package has them: importing the sources through tsx
  // cost each block about 0.6 CPU-seconds more.
  symlinkSync(path.join(REPO_ROOT, 'dist'), path.join(pkgDir, 'dist'));
  const pkg = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
    main: string;
    types: string;
    exports: Record<string, unknown>;
    dependencies: Record<string, string>;
    peerDependencies?: Record<string, string>;
  };
  writeFileSync(
    path.join(pkgDir, 'package.json'),
    JSON.stringify({
      name: 'idlease',
      version: '0.0.0-docs',
      type: 'module',
      main: pkg.main,
      types: pkg.types,
      exports: pkg.exports,
      bin: { idlease: 'bin/idlease' },
    }),
  );
  const bin = path.join(pkgDir, 'bin', 'idlease');
  writeFileSync(bin, `#!/bin/sh\nexec "${process.execPath}" "${CLI_BIN}" "$@"\n`);
  chmodSync(bin, 0o755);
  symlinkSync(bin, path.join(nm, '.bin', 'idlease'));
  // Optional peers (postgres.js) too: a user who passes one has installed it.
  const deps = [...Object.keys(pkg.dependencies), ...Object.keys(pkg.peerDependencies ?? {})];
  // A TypeScript user of `pg` also installs `@types/pg`: link a dependency's types where it has them.
  const typed = deps.map((dep) => `@types/${dep}`).filter((t) => existsSync(path.join(REPO_ROOT, 'node_modules', t)));
  const link = (target: string, name: string) => {
    mkdirSync(path.dirname(path.join(nm, name)), { recursive: true });
    symlinkSync(target, path.join(nm, name));
  };
  for (const dep of [...deps, ...typed]) link(path.join(REPO_ROOT, 'node_modules', dep), dep);
  // The recipe tools (test/recipes/package.json, installed in test/recipes/node_modules): a user of
  // a recipe has installed its tool, and its command-line tool (`npx prisma generate`) with it.
  for (const tool of recipeTools()) {
    const dir = recipeModule(tool);
    link(dir, tool);
    const { bin } = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { bin?: string | Record<string, string> };
    const bins = typeof bin === 'string' ? { [tool]: bin } : (bin ?? {});
    for (const [name, file] of Object.entries(bins)) symlinkSync(path.join(dir, file), path.join(nm, '.bin', name));
  }
  return (modulesDir = nm);
}

export function removeSharedModules(): void {
  if (modulesDir) rmSync(path.dirname(modulesDir), { recursive: true, force: true });
  modulesDir = undefined;
}

export async function createContext(target: Target, code: string): Promise<Context> {
  const dir = mkdtempSync(path.join(tmpdir(), `idlease-docs-${target}-`));
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'docs-sample', private: true, type: 'module' }));
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: SAMPLE_COMPILER_OPTIONS }));
  symlinkSync(sharedModules(), path.join(dir, 'node_modules'));
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !/^IDLEASE_(URL|TOKEN)$/.test(k)) env[k] = v;
  }
  env.PATH = `${path.join(sharedModules(), '.bin')}${path.delimiter}${process.env.PATH ?? ''}`;
  const ctx: Context = { target, dir, env, dbs: [], stops: [] };
  if (target === 'pglite') env.DATABASE_URL = `pglite:${path.join(dir, 'pglite-db')}`;
  else if (target !== 'none') {
    const db = await createTestDb(target, 'docs');
    ctx.dbs.push(db);
    env.DATABASE_URL = db.url;
  }
  // The CLI reads IDLEASE_URL: a block for a database sees it; one without runs on the embedded default.
  if (env.DATABASE_URL) env.IDLEASE_URL = env.DATABASE_URL;
  // The repo's knexfile.ts reads its PGlite directory from here (default ./.idlease/pglite).
  env.IDLEASE_PGLITE_URL = `pglite:${path.join(dir, 'knexfile-pglite')}`;
  await addExtraDatabases(ctx, code);
  return ctx;
}

/** Fresh databases for the URL variables this block names and the context lacks. */
export async function addExtraDatabases(ctx: Context, code: string): Promise<void> {
  for (const name of new Set(code.match(EXTRA_DB) ?? [])) {
    if (ctx.env[name]) continue;
    const db = await createTestDb(/PG_URL$/.test(name) ? 'postgres' : 'mysql', `docs_${name.toLowerCase()}`);
    ctx.dbs.push(db);
    ctx.env[name] = db.url;
  }
  if (REDIS_URL.test(code) && !ctx.env.REDIS_URL) {
    const redis = await startRedis('none');
    ctx.stops.push(() => redis.destroy());
    ctx.env.REDIS_URL = `redis://127.0.0.1:${redis.port}`;
  }
}

export async function disposeContext(ctx: Context): Promise<void> {
  await Promise.all([...ctx.dbs.map((d) => d.drop()), ...ctx.stops.map((stop) => stop())]);
  rmSync(ctx.dir, { recursive: true, force: true });
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** A process in its own group, so background jobs a shell sample starts end with it. */
function run(cmd: string, args: string[], ctx: Context, input?: string, cwd = ctx.dir): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: ctx.env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    // A child that exits before reading its input (a failing sample) closes the pipe: EPIPE on
    // our write is expected then, and unhandled it would end the whole test run.
    child.stdin.on('error', () => undefined);
    child.stdin.end(input ?? '');
    const killGroup = () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, RUN_TIMEOUT_MS);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      killGroup(); // leftovers a sample forgot to stop must not hold the pipes open
      // The output is whole once the pipes close ('exit' can come before the last of it is
      // read); a leftover that left the group could hold them, so not longer than 2 s.
      const done = () => resolve({ code, stdout, stderr, timedOut });
      const drained = setTimeout(done, 2_000);
      child.once('close', () => {
        clearTimeout(drained);
        done();
      });
    });
  });
}

function sqlCommand(flavor: Target, url: string): [string, string[]] {
  if (flavor === 'postgres') return ['psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url, '-f', '-']];
  const u = new URL(url);
  return [
    'mysql',
    [
      '--protocol=TCP',
      '-h',
      u.hostname,
      '-P',
      u.port || '3306',
      '-u',
      decodeURIComponent(u.username) || 'root',
      ...(u.password ? [`-p${decodeURIComponent(u.password)}`] : []),
      u.pathname.slice(1),
    ],
  ];
}

async function runPglite(dataDir: string, sql: string): Promise<RunResult> {
  const db = new PGlite(dataDir);
  try {
    const results = await db.exec(sql);
    return {
      code: 0,
      stdout: JSON.stringify(
        results.map((r) => r.rows),
        (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v),
      ),
      stderr: '',
      timedOut: false,
    };
  } catch (err) {
    return { code: 1, stdout: '', stderr: String((err as Error)?.message ?? err), timedOut: false };
  } finally {
    await db.close();
  }
}

/** Normalise what legitimately differs between runs: wall-clock timestamps. */
const normalise = (s: string) =>
  s
    .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, '<time>')
    .replace(/[ \t]+$/gm, '')
    .trimEnd();

/** Runs `$ command` lines and compares each one's stdout with the lines shown under it. */
async function runConsole(block: DocBlock, ctx: Context): Promise<RunResult> {
  const steps: Array<{ cmd: string; expected: string[] }> = [];
  for (const line of block.code.split('\n')) {
    if (line.startsWith('$ ')) steps.push({ cmd: line.slice(2), expected: [] });
    else if (steps.length > 0) steps.at(-1)!.expected.push(line);
    else if (line.trim() !== '') throw new Error('a console block starts with a `$ command` line');
  }
  let transcript = '';
  for (const step of steps) {
    const r = await run('bash', ['-o', 'pipefail', '-c', step.cmd], ctx);
    transcript += `$ ${step.cmd}\n${r.stdout}`;
    if (r.code !== 0 || r.timedOut) return { ...r, stdout: transcript };
    if (normalise(r.stdout) !== normalise(step.expected.join('\n'))) {
      return {
        code: 1,
        stdout: transcript,
        stderr: `output of \`${step.cmd}\` differs from the block:\n--- block\n${step.expected.join('\n').trimEnd()}\n--- actual\n${r.stdout.trimEnd()}\n${r.stderr}`,
        timedOut: false,
      };
    }
  }
  return { code: 0, stdout: transcript, stderr: '', timedOut: false };
}

export async function runBlock(block: DocBlock, ctx: Context): Promise<RunResult> {
  const name = `block-${block.line}`;
  switch (block.lang) {
    case 'ts':
    case 'typescript': {
      writeFileSync(path.join(ctx.dir, `${name}.ts`), block.code);
      // V8's baseline WebAssembly code only, as the CLI's short commands run PGlite (src/cli/bin.ts):
      // a block that opens the embedded database is over in seconds, and optimizing PGlite on top
      // was most of its CPU. Nothing a block shows depends on it.
      const flags = ['--liftoff-only', '--enable-source-maps'];
      // A block that imports TypeScript of its own (Prisma's generated client) runs through tsx.
      if (LOCAL_IMPORT.test(block.code)) return run(process.execPath, [...flags, '--import', TSX_LOADER, `${name}.ts`], ctx);
      // The others are stripped of their types here, as tsx would strip them (esbuild, the same
      // options), and run as plain node: tsx's loader cost each block ~1.4 CPU-seconds to start,
      // 70 blocks a run. Their types are checked with tsc (typecheckBlocks).
      const js = transformSync(block.code, {
        loader: 'ts',
        format: 'esm',
        target: 'node20',
        sourcefile: `${name}.ts`,
        sourcemap: 'inline',
        tsconfigRaw: { compilerOptions: SAMPLE_COMPILER_OPTIONS },
      });
      writeFileSync(path.join(ctx.dir, `${name}.mjs`), js.code);
      return run(process.execPath, [...flags, `${name}.mjs`], ctx);
    }
    case 'sh':
    case 'bash':
    case 'shell': {
      const script = path.join(ctx.dir, `${name}.sh`);
      writeFileSync(script, block.code);
      // `checkout`: commands meant for a clone of this repository (its knexfile, npm scripts).
      return run('bash', ['-e', '-o', 'pipefail', script], ctx, undefined, block.checkout ? REPO_ROOT : ctx.dir);
    }
    case 'console':
      return runConsole(block, ctx);
    case 'sql': {
      if (ctx.target === 'pglite') return runPglite(ctx.env.DATABASE_URL!.slice('pglite:'.length), block.code);
      const [cmd, args] = sqlCommand(ctx.target, ctx.env.DATABASE_URL!);
      return run(cmd, args, ctx, block.code);
    }
    default:
      throw new Error(`no runner for ${block.lang}`);
  }
}

/**
 * Type-checks TypeScript blocks together, as a user's editor and `tsc --strict` would see
 * them: tsx runs code without checking types, so a sample could run and still not compile.
 */
export function typecheckBlocks(blocks: readonly DocBlock[], projectDir?: string): Promise<RunResult> {
  // projectDir: a sample project that already holds what the blocks import (a generated client).
  const dir = projectDir ?? mkdtempSync(path.join(tmpdir(), 'idlease-docs-tsc-'));
  if (!projectDir) {
    symlinkSync(sharedModules(), path.join(dir, 'node_modules'));
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'docs-sample', private: true, type: 'module' }));
  }
  const files = blocks.map((b) => {
    const name = `${b.file.replace(/[^a-z0-9]+/gi, '_')}_${b.line}.ts`;
    writeFileSync(path.join(dir, name), b.code);
    return name;
  });
  writeFileSync(
    path.join(dir, 'tsconfig.typecheck.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2022'],
        types: ['node'],
        typeRoots: [path.join(REPO_ROOT, 'node_modules/@types')],
        ...SAMPLE_COMPILER_OPTIONS,
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        moduleDetection: 'force',
        allowImportingTsExtensions: true,
      },
      files,
    }),
  );
  const ctx: Context = { target: 'none', dir, env: { ...(process.env as Record<string, string>) }, dbs: [], stops: [] };
  return run(process.execPath, [path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.typecheck.json'], ctx).finally(
    () => {
      if (!projectDir) rmSync(dir, { recursive: true, force: true });
    },
  );
}
