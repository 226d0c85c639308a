/**
 * Issue 21, item 6: the package installs as documented. A copy of this checkout's files (what a
 * fresh clone has, with the dependencies `npm ci` installs) is packed with `npm pack`, and the
 * tarball is installed into a new app in a temp dir from the npm cache (the registry only for
 * what the cache lacks). In that app: a strict NodeNext type-check and a run importing every
 * export path, `npx idlease next order -n 3` on the embedded default, the README's knex CLI
 * route (its `installed` blocks, as written), and `idlease migrate` beside the app's own knex
 * bookkeeping in public, which must stay where it is. Slow and CPU-heavy (tsc, npm): in the
 * ALONE list of vitest.config.ts.
 */
import { spawn, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { extractBlocks } from '../docs/extract.js';
import { REPO_ROOT } from '../helpers/cli.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

const repoPkg = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
  version: string;
  files: string[];
  scripts: Record<string, string>;
  devDependencies: Record<string, string>;
};
const TARBALL = `idlease-${repoPkg.version}.tgz`;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}, timeoutMs = 240_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

function show(r: Run): string {
  return `exit ${r.code}\n--- stderr\n${r.stderr.slice(-3000)}\n--- stdout\n${r.stdout.slice(-3000)}`;
}

async function ok(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<Run> {
  const r = await run(cmd, args, cwd, env);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} (in ${cwd}) failed: ${show(r)}`);
  return r;
}

/** npm from the cache; the registry only for what the cache lacks (the packuments `npm ci` never fetched). */
const NPM_INSTALL = ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];

/** The files a fresh clone of this checkout has: tracked and new ones, nothing ignored (no dist/, no node_modules). */
function freshCopy(into: string): void {
  const ls = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: REPO_ROOT, encoding: 'utf8' });
  if (ls.status !== 0)
    throw new Error(
      `git ls-files failed in ${REPO_ROOT} (this test copies the checkout's files; it needs git and a git checkout): ${ls.stderr}`,
    );
  for (const file of ls.stdout.split('\0')) {
    if (file === '' || file === 'node_modules' || !existsSync(path.join(REPO_ROOT, file))) continue;
    mkdirSync(path.dirname(path.join(into, file)), { recursive: true });
    cpSync(path.join(REPO_ROOT, file), path.join(into, file));
  }
}

/** Every file in a directory tree, relative, with / separators. */
function filesUnder(dir: string, prefix = ''): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(path.join(dir, e.name), `${prefix}${e.name}/`) : [`${prefix}${e.name}`],
  );
}

async function publicTables(knex: Knex): Promise<string[]> {
  const res = (await knex.raw(`SELECT tablename::text AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)) as {
    rows: Array<{ name: string }>;
  };
  return res.rows.map((r) => r.name);
}

describe(`the packed tarball (${TARBALL}) installed into a new app`, () => {
  let work: string;
  let checkout: string;
  let app: string;
  let pkgDir: string;

  beforeAll(async () => {
    if (!existsSync(path.join(REPO_ROOT, 'node_modules/typescript/package.json'))) {
      throw new Error(
        `${REPO_ROOT}/node_modules has no typescript: run \`npm ci\` in the checkout first (this test packs it and installs from the npm cache it fills).`,
      );
    }
    work = mkdtempSync(path.join(tmpdir(), 'idlease-pack-'));
    // A fresh clone after `npm ci`: the checkout's files and its dependencies, no dist/.
    checkout = path.join(work, 'checkout');
    freshCopy(checkout);
    expect(existsSync(path.join(checkout, 'dist'))).toBe(false);
    symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(checkout, 'node_modules'));
    await ok('npm', ['pack', '--loglevel=error', '--pack-destination', work], checkout);
    expect(existsSync(path.join(work, TARBALL)), `npm pack wrote ${readdirSync(work).join(', ')}`).toBe(true);

    app = path.join(work, 'app');
    mkdirSync(app);
    writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }, null, 2));
    const r = await run('npm', [...NPM_INSTALL, path.join(work, TARBALL)], app);
    if (r.code !== 0) {
      throw new Error(
        `npm install of the tarball failed. It installs from the npm cache that \`npm ci\` filled, and asks registry.npmjs.org for the rest: run \`npm ci\` in the checkout, with the registry reachable. ${show(r)}`,
      );
    }
    await ok(
      'npm',
      [
        ...NPM_INSTALL,
        '--save-dev',
        `typescript@${repoPkg.devDependencies.typescript}`,
        `@types/node@${repoPkg.devDependencies['@types/node']}`,
      ],
      app,
    );
    pkgDir = path.join(app, 'node_modules/idlease');
  }, 600_000);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('ships what the README and package.json name, and nothing that points at what is not shipped', () => {
    const files = filesUnder(pkgDir);
    for (const f of [
      'LICENSE',
      'README.md',
      'CHANGELOG.md',
      'package.json',
      'bin/idlease.js',
      'dist/src/index.js',
      'dist/src/index.d.ts',
      // The embedded template: without it a first run is PGlite's initdb (~0.9 GB peak RSS).
      'dist/pglite-template.tar.gz',
      'docs/serve.md',
    ]) {
      expect(files, f).toContain(f);
    }
    expect(
      files.filter((f) => f.endsWith('.map')),
      'source maps (src/ is not shipped)',
    ).toEqual([]);
    expect(
      files.filter((f) => /sourceMappingURL/.test(f.endsWith('.js') ? readFileSync(path.join(pkgDir, f), 'utf8') : '')),
      'sourceMappingURL comments',
    ).toEqual([]);
    // Only files knex can load: its default extensions take .ts, so a .d.ts here kills the knex CLI.
    const migrations = files.filter((f) => f.startsWith('dist/migrations/'));
    expect(migrations.length).toBeGreaterThan(0);
    expect(migrations.filter((f) => !f.endsWith('.js'))).toEqual([]);
    expect(files.filter((f) => f.startsWith('src/') || f.startsWith('test/'))).toEqual([]);
    // Every relative link of the README resolves inside the package (on the registry page npm
    // resolves them against `repository`, and they are the same files).
    const readme = readFileSync(path.join(pkgDir, 'README.md'), 'utf8');
    const links = [...readme.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => m[1]!).filter((l) => !/^[a-z]+:/.test(l));
    expect(links.length).toBeGreaterThan(10);
    expect(
      links.filter((l) => !existsSync(path.join(pkgDir, l))),
      'README links to files the package lacks',
    ).toEqual([]);
    const pkg = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8')) as Record<string, unknown>;
    expect(pkg).toMatchObject({
      license: 'MIT',
      type: 'module',
      engines: { node: '>=20' },
      repository: { url: 'git+https://github.com/idlease/idlease.git' },
      homepage: expect.stringContaining('github.com/idlease/idlease'),
      bugs: { url: expect.stringContaining('github.com/idlease/idlease') },
    });
    expect(readFileSync(path.join(pkgDir, 'LICENSE'), 'utf8')).toMatch(/MIT License[\s\S]*Copyright \(c\) 2026 idlease contributors/);
    expect(readFileSync(path.join(pkgDir, 'CHANGELOG.md'), 'utf8')).toMatch(
      new RegExp(`^## ${repoPkg.version.replace(/\./g, '\\.')}\\b`, 'm'),
    );
  });

  it('`npx idlease --version` prints the package version', async () => {
    const r = await ok('npx', ['--no-install', 'idlease', '--version'], app);
    expect(r.stdout).toBe(`${repoPkg.version}\n`);
  });

  it('type-checks strictly (NodeNext, no skipLibCheck) and runs, importing every export path', async () => {
    writeFileSync(
      path.join(app, 'tsconfig.json'),
      JSON.stringify(
        {
          compilerOptions: {
            target: 'ES2022',
            module: 'NodeNext',
            moduleResolution: 'NodeNext',
            lib: ['ES2022'],
            types: ['node'],
            strict: true,
            noUncheckedIndexedAccess: true,
            exactOptionalPropertyTypes: true,
            skipLibCheck: false,
            verbatimModuleSyntax: true,
            outDir: 'build',
            rootDir: '.',
          },
          files: ['app.ts'],
        },
        null,
        2,
      ),
    );
    writeFileSync(
      path.join(app, 'app.ts'),
      `
import * as idlease from 'idlease';
import { addTag, connect, createSegmentAllocator, decodeId, migrate, type MigrateResult } from 'idlease';
import * as metrics from 'idlease/metrics';
import { collectMetrics } from 'idlease/metrics';
import * as testing from 'idlease/testing';
import { segmentStoreConformance, type SegmentStore } from 'idlease/testing';

const knex = connect('pglite:memory');
const result: MigrateResult = await migrate(knex);
await addTag(knex, { tag: 'order' });
const orders = createSegmentAllocator({ knex, tag: 'order' });
const ids: bigint[] = await orders.nextBatch(3);
// @ts-expect-error IDs are bigint, never a JS number: the package's types must say so.
const wrong: number = await orders.next();
await orders.close();
await knex.destroy();
const store: SegmentStore | undefined = undefined;
console.log(JSON.stringify({
  ids: ids.map(String), applied: result.applied, next: typeof wrong, store: typeof store,
  decode: typeof decodeId, collectMetrics: typeof collectMetrics, conformance: typeof segmentStoreConformance,
  exports: [Object.keys(idlease).length > 20, Object.keys(metrics), Object.keys(testing)],
}));
`,
    );
    const tsc = await run('npx', ['--no-install', 'tsc', '-p', '.'], app);
    expect(tsc.code, `tsc in the app: ${show(tsc)}`).toBe(0);
    const r = await ok(process.execPath, ['build/app.js'], app);
    expect(JSON.parse(r.stdout)).toEqual({
      ids: ['1', '2', '3'],
      // pglite:memory is loaded from the shipped template, which carries the default migrations.
      applied: [],
      next: 'bigint',
      store: 'undefined',
      decode: 'function',
      collectMetrics: 'function',
      conformance: 'function',
      exports: [true, ['collectMetrics', 'dashboardQueries', 'grafanaDashboard'], ['segmentStoreConformance']],
    });
    // CommonJS on Node ≥ 20.19 loads the ESM build through require() (the `default` condition);
    // import() works as before.
    const imported = await ok(
      process.execPath,
      ['--input-type=commonjs', '-e', "import('idlease').then((m) => console.log(typeof m.connect))"],
      app,
    );
    expect(imported.stdout).toBe('function\n');
  });

  it('a CommonJS app require()s every export path and ./package.json, and draws IDs', async () => {
    writeFileSync(
      path.join(app, 'cjs-app.cjs'),
      `
const idlease = require('idlease');
const { collectMetrics } = require('idlease/metrics');
const { segmentStoreConformance } = require('idlease/testing');
const { version } = require('idlease/package.json');
(async () => {
  const knex = idlease.connect('pglite:memory');
  await idlease.migrate(knex);
  const orders = idlease.createSegmentAllocator({ knex, tag: 'cjs', create: { start: 1, step: 10 } });
  const ids = await orders.nextBatch(3);
  await orders.close();
  await knex.destroy();
  console.log(JSON.stringify({ ids: ids.map(String), version, metrics: typeof collectMetrics, testing: typeof segmentStoreConformance }));
})();
`,
    );
    const r = await ok(process.execPath, ['cjs-app.cjs'], app);
    expect(JSON.parse(r.stdout)).toEqual({ ids: ['1', '2', '3'], version: repoPkg.version, metrics: 'function', testing: 'function' });
  }, 240_000);

  it('the published manifest runs nothing at install (no prepare), and packing left the checkout as it was', () => {
    const pkg = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8')) as {
      scripts?: Record<string, string>;
      dependencies: Record<string, string>;
      keywords?: string[];
    };
    for (const script of ['preinstall', 'install', 'postinstall', 'prepare']) expect(pkg.scripts?.[script], script).toBeUndefined();
    // Caret ranges: an app's own pg or mysql2 dedupes with idlease's.
    for (const [name, range] of Object.entries(pkg.dependencies)) expect(range, name).toMatch(/^\^\d/);
    expect(pkg.keywords?.length).toBeGreaterThan(5);
    // The packed copy of the checkout: its package.json is back byte for byte, prepare and all.
    expect(readFileSync(path.join(checkout, 'package.json'), 'utf8')).toBe(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8'));
    expect(repoPkg.scripts.prepare, 'a clone still builds dist/ on npm ci').toBeDefined();
    expect(existsSync(path.join(checkout, 'package.json.prepack'))).toBe(false);
  });

  it('DATABASE_URL alone reaches the server, and the hints printed under npx run as printed', async () => {
    const db = await createTestDb('postgres', 'pack_env');
    try {
      const env = { DATABASE_URL: db.url, IDLEASE_URL: undefined };
      const first = await run('npx', ['--no-install', 'idlease', 'next', 'order'], app, env);
      expect(first.code, show(first)).toBe(2);
      // Not a new embedded database: the server's, which is not migrated yet; the hint is for npx.
      expect(first.stderr).toContain('Run `npx idlease migrate` first.');
      expect(first.stderr).toContain('$DATABASE_URL');
      await ok('bash', ['-c', 'npx idlease migrate'], app, env);
      const second = await run('npx', ['--no-install', 'idlease', 'next', 'order'], app, env);
      const hint = /`(npx idlease tag add [^`]+)`/.exec(second.stderr)?.[1];
      expect(hint, show(second)).toBe('npx idlease tag add order');
      await ok('bash', ['-c', hint!], app, env);
      expect((await ok('npx', ['--no-install', 'idlease', 'next', 'order', '-n', '2'], app, env)).stdout).toBe('1\n2\n');
      expect((await db.knex.raw('SELECT max_id FROM idlease.idlease_segments')).rows).toHaveLength(1);
    } finally {
      await db.drop();
    }
  }, 300_000);

  it('`npx idlease next order -n 3` on the embedded default prints 1, 2, 3 (and 4, 5, 6 after it)', async () => {
    const first = await ok('npx', ['--no-install', 'idlease', 'next', 'order', '-n', '3'], app);
    expect(first.stdout).toBe('1\n2\n3\n');
    expect(existsSync(path.join(app, '.idlease/pglite')), 'the embedded database in the app directory').toBe(true);
    expect((await ok('npx', ['--no-install', 'idlease', 'next', 'order', '-n', '3'], app)).stdout).toBe('4\n5\n6\n');
  });

  describe("the README's knex CLI route and idlease migrate beside the app's own knex bookkeeping (PostgreSQL)", () => {
    let db: TestDb;
    beforeAll(async () => {
      db = await createTestDb('postgres', 'pack_knex');
    });
    afterAll(async () => {
      await db?.drop();
    });

    it("knex runs the shipped files; idlease migrate moves nothing of knex's; neither knex run re-runs a step", async () => {
      const env = { DATABASE_URL: db.url };
      // The app's own migrations, in knex's default bookkeeping (public.knex_migrations).
      mkdirSync(path.join(app, 'migrations'), { recursive: true });
      writeFileSync(
        path.join(app, 'migrations/20250101000000_users.js'),
        "export const up = (knex) => knex.schema.createTable('users', (t) => { t.bigInteger('id').primary(); });\n" +
          "export const down = (knex) => knex.schema.dropTable('users');\n",
      );
      writeFileSync(
        path.join(app, 'knexfile.js'),
        "export default { client: 'pg', connection: process.env.DATABASE_URL, migrations: { directory: './migrations' } };\n",
      );
      expect((await ok('npx', ['--no-install', 'knex', 'migrate:latest'], app, env)).stdout).toMatch(/Batch 1 run: 1 migrations/);

      // The README's blocks marked `installed`, as written: the knexfile (named by its first line) and the commands.
      const blocks = extractBlocks('README.md', readFileSync(path.join(pkgDir, 'README.md'), 'utf8')).filter((b) => b.installed);
      const knexfile = blocks.find((b) => b.lang === 'js');
      const commands = blocks.find((b) => b.lang === 'sh');
      expect(knexfile && commands, 'README.md has a `js installed` knexfile and a `sh installed` block').toBeTruthy();
      const name = /^\/\/\s*(\S+\.[cm]?js)\s*$/m.exec(knexfile!.code.split('\n')[0]!)?.[1];
      expect(name, 'the knexfile block names its file on its first line').toBeDefined();
      writeFileSync(path.join(app, name!), knexfile!.code);
      // The default directory: what `idlease migrate` installs (tickets/, next-id/, workers/ are opt-in directories).
      const shipped = readdirSync(path.join(pkgDir, 'dist/migrations')).filter((f) => f.endsWith('.js')).length;
      const route = await ok('bash', ['-e', '-o', 'pipefail', '-c', commands!.code], app, env);
      expect(route.stdout).toMatch(new RegExp(`Batch 1 run: ${shipped} migrations`));
      expect(route.stdout).toMatch(/No Pending Migration files Found/);
      const before = await publicTables(db.knex);
      expect(before).toEqual(['idlease_migrations', 'idlease_migrations_lock', 'knex_migrations', 'knex_migrations_lock', 'users']);

      const migrated = await ok('npx', ['--no-install', 'idlease', '--url', db.url, 'migrate'], app);
      expect(migrated.stdout).not.toMatch(/moved/);
      expect(await publicTables(db.knex)).toEqual(before);
      expect((await ok('npx', ['--no-install', 'knex', 'migrate:latest'], app, env)).stdout).toMatch(/Already up to date/);
      expect((await ok('npx', ['--no-install', 'knex', 'migrate:latest', '--knexfile', name!], app, env)).stdout).toMatch(
        /Already up to date/,
      );
      expect(await publicTables(db.knex)).toEqual(before);
      // And the segment table the knex files installed is the one the CLI uses.
      await ok('npx', ['--no-install', 'idlease', '--url', db.url, 'tag', 'add', 'order'], app);
      expect((await ok('npx', ['--no-install', 'idlease', '--url', db.url, 'next', 'order', '-n', '2'], app)).stdout).toBe('1\n2\n');
    });
  });

  describe('an app with only a pool: knex deleted from node_modules (issue 22)', () => {
    const dbs: TestDb[] = [];
    beforeAll(async () => {
      for (const flavor of ['postgres', 'mysql'] as const) {
        const db = await createTestDb(flavor, 'pack_pool');
        dbs.push(db);
        // Creating the tables is knex's job (migrate); the app below runs without it.
        const next = flavor === 'postgres' ? ['--next-id'] : [];
        await ok(
          'npx',
          [
            '--no-install',
            'idlease',
            '--url',
            db.url,
            'migrate',
            '--workers',
            '--tickets',
            '--tickets-increment',
            '1',
            '--tickets-offset',
            '1',
            ...next,
          ],
          app,
        );
      }
    });
    afterAll(async () => {
      await Promise.all(dbs.map((d) => d.drop()));
    });

    it('a pg.Pool runs segment, ticket and snowflake allocators, tag admin and the next_id() bump; a mysql2 pool the three allocators', async () => {
      const script = `
import pg from 'pg';
import mysql from 'mysql2';
import { addTag, listTags, bumpNextId, createSegmentAllocator, createTicketAllocator, createSnowflakeAllocator } from 'idlease';
const [pgUrl, myUrl] = process.argv.slice(2);
const out = {};
async function allocators(name, pool, admin) {
  if (admin) {
    await addTag(pool, { tag: 'order' });
    out[name + ' tags'] = (await listTags(pool)).map((r) => r.tag);
    out[name + ' bump'] = typeof (await bumpNextId(pool, { aheadMs: 10 }));
  } else {
    await addTag(pool, { tag: 'order' });
  }
  const seg = createSegmentAllocator({ pool, tag: 'order' });
  const tick = createTicketAllocator({ servers: [{ pool, offset: 1 }] });
  const snow = createSnowflakeAllocator({ pool });
  const ids = [];
  for (let i = 0; i < 50; i++) ids.push(await seg.next(), await tick.next(), await snow.next());
  await Promise.all([seg.close(), tick.close(), snow.close()]);
  out[name + ' ids'] = ids.length;
  out[name + ' distinct per mechanism'] = [0, 1, 2].map((k) => new Set(ids.filter((_, i) => i % 3 === k)).size);
}
const pgPool = new pg.Pool({ connectionString: pgUrl, max: 4 });
await allocators('pg', pgPool, true);
await pgPool.end();
const myPool = mysql.createPool({ uri: myUrl, connectionLimit: 4 });
await allocators('mysql2', myPool, false);
await new Promise((r) => myPool.end(r));
const loaded = Object.keys((await import('node:module')).createRequire(import.meta.url).cache).filter((k) => k.includes('/knex'));
out.knexLoaded = loaded.length;
console.log(JSON.stringify(out));
`;
      writeFileSync(path.join(app, 'pool-only.mjs'), script);
      // knex and knex-pglite come with idlease; an app on a pool must run with them gone.
      const moved = ['knex', 'knex-pglite'].filter((m) => existsSync(path.join(app, 'node_modules', m)));
      expect(moved, 'npm installed knex into the app (it is a dependency of idlease)').toContain('knex');
      for (const m of moved) renameSync(path.join(app, 'node_modules', m), path.join(work, `${m}.removed`));
      try {
        const r = await ok('node', ['pool-only.mjs', dbs[0]!.url, dbs[1]!.url], app);
        expect(JSON.parse(r.stdout)).toEqual({
          'pg tags': ['order'],
          'pg bump': 'object',
          'pg ids': 150,
          'pg distinct per mechanism': [50, 50, 50],
          'mysql2 ids': 150,
          'mysql2 distinct per mechanism': [50, 50, 50],
          knexLoaded: 0,
        });
        // The control: the same app reaching for knex fails now, so the run above never needed it.
        const control = await run('node', ['-e', "import('idlease').then((m) => m.connect('postgres://x@127.0.0.1/x'))"], app);
        expect(control.code).not.toBe(0);
        expect(control.stderr).toMatch(/Cannot find module 'knex'/);
      } finally {
        for (const m of moved) renameSync(path.join(work, `${m}.removed`), path.join(app, 'node_modules', m));
      }
    });
  });

  it("`npm install <path to a fresh checkout>` stops with the README's way instead of `tsc: not found`", async () => {
    const bare = path.join(work, 'bare-checkout');
    freshCopy(bare);
    const other = path.join(work, 'app-from-checkout');
    mkdirSync(other);
    writeFileSync(path.join(other, 'package.json'), JSON.stringify({ name: 'app2', private: true, type: 'module' }));
    const r = await run('npm', [...NPM_INSTALL, bare], other);
    expect(r.code, show(r)).not.toBe(0);
    expect(r.stderr).not.toMatch(/tsc: not found/);
    expect(r.stderr).toMatch(/npm ci && npm pack/);
  });
});
