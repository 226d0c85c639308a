/**
 * What a new user types and reads (issue "what users type and read"): one row per thing a user
 * tripped on, each a real CLI process against the real servers; then every printed hint is
 * followed, as printed, through a POSIX shell, until the command it was printed for succeeds.
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { CLI_BIN, runCli, type CliResult } from '../helpers/cli.js';
import { startServe } from '../helpers/serve-process.js';

/** Neither variable leaks in from the test runner's environment: each row sets what it means. */
const NO_ENV = { IDLEASE_URL: undefined, DATABASE_URL: undefined };

let root: string;
let my: TestDb;
let pg: TestDb;
/** A directory holding an `idlease` executable that runs this checkout's CLI: hints run as printed. */
let binDir: string;

beforeAll(async () => {
  root = mkdtempSync(path.join(tmpdir(), 'idlease-cli-users-'));
  binDir = path.join(root, 'bin');
  const shim = path.join(binDir, 'idlease');
  mkdirSync(binDir);
  writeFileSync(shim, `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(CLI_BIN)} "$@"\n`);
  chmodSync(shim, 0o755);
  [my, pg] = await Promise.all([createTestDb('mysql', 'cli_users'), createTestDb('postgres', 'cli_users')]);
});

afterAll(async () => {
  await Promise.all([my?.drop(), pg?.drop()]);
  rmSync(root, { recursive: true, force: true });
});

let dirs = 0;
function freshDir(): string {
  return mkdtempSync(path.join(root, `p${++dirs}-`));
}

/** `sh -c <line>` with the idlease shim first on PATH. */
function sh(line: string, cwd: string, env: NodeJS.ProcessEnv = {}, timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('/bin/sh', ['-c', line], {
      cwd,
      env: { ...process.env, ...NO_ENV, ...env, PATH: `${binDir}:${process.env.PATH}` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
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

function expectError(res: CliResult, code: string, exit: number): void {
  expect(res.stderr, res.stderr).toMatch(new RegExp(`^idlease: ${code}: [^\\n]+\\n$`));
  expect(res.code, res.stderr).toBe(exit);
}

interface Row {
  why: string;
  run: () => Promise<void>;
}

const cli = (args: string[], env: NodeJS.ProcessEnv = {}, cwd = freshDir()) => runCli(args, { cwd, env: { ...NO_ENV, ...env } });

const ROWS: Row[] = [
  {
    why: 'DATABASE_URL alone reaches the server (no silent fallback to a new embedded database)',
    run: async () => {
      await cli(['--url', pg.url, 'migrate']);
      await cli(['--url', pg.url, 'tag', 'add', 'env_order', '--start', '5286']);
      const res = await cli(['next', 'env_order', '-n', '2'], { DATABASE_URL: pg.url });
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toBe('5286\n5287\n');
      // --url wins over both variables, IDLEASE_URL over DATABASE_URL.
      const over = await cli(['next', 'env_order'], { IDLEASE_URL: pg.url, DATABASE_URL: 'mysql://nobody@127.0.0.1:1/x' });
      expect(over.stdout).toBe('5288\n');
    },
  },
  {
    why: 'an error of a command whose URL came from $DATABASE_URL names the variable',
    run: async () => {
      const url = new URL(pg.url);
      url.pathname = '/idl_no_such_database';
      const res = await cli(['tag', 'list'], { DATABASE_URL: url.href });
      expectError(res, 'BAD_CONFIG', 2);
      expect(res.stderr).toContain('$DATABASE_URL');
    },
  },
  {
    why: 'a new embedded database says so on stderr, in one line',
    run: async () => {
      const cwd = freshDir();
      const first = await cli(['next', 'order'], {}, cwd);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stderr).toMatch(/^idlease: created a new embedded database in \.\/\.idlease\/pglite\/ [^\n]*\.gitignore\n$/);
      const again = await cli(['next', 'order'], {}, cwd);
      expect(again.stderr).toBe('');
    },
  },
  {
    why: 'a MySQL URL without a database is BAD_CONFIG saying to add one (not INTERNAL "No database selected")',
    run: async () => {
      const base = new URL(inject('mysqlUrl'));
      base.pathname = '';
      for (const url of [base.href.replace(/\/$/, ''), base.href.replace(/\/?$/, '/')]) {
        for (const args of [
          ['tag', 'list'],
          ['workers', 'list'],
          ['migrate', '--unlock'],
          ['next', 'order'],
          ['serve', '--port', '0'],
        ]) {
          const res = await cli(['--url', url, ...args]);
          expectError(res, 'BAD_CONFIG', 2);
          expect(res.stderr).toMatch(/names no database: add one/);
        }
      }
    },
  },
  {
    why: 'serve --port 70000 is BAD_ARGUMENT, exit 2',
    run: async () => expectError(await cli(['serve', '--port', '70000']), 'BAD_ARGUMENT', 2),
  },
  {
    why: 'redis status with an http:// --redis-url is BAD_CONFIG, exit 2',
    run: async () => {
      const res = await cli(['redis', 'status', 'x', '--redis-url', 'http://x']);
      expectError(res, 'BAD_CONFIG', 2);
      expect(res.stderr).toContain('redis://');
    },
  },
  {
    why: '`next -n 1000000 | head -1` is quiet (EPIPE handled as Unix tools do)',
    run: async () => {
      const res = await sh('idlease next order -n 1000000 | head -1', freshDir(), {}, 120_000);
      expect(res.stdout).toBe('1\n');
      expect(res.stderr).not.toMatch(/EPIPE|Error|at /);
    },
  },
  {
    why: 'mysql:// at a PostgreSQL port is named as the wrong kind of server within --wait',
    run: async () => {
      const pgPort = new URL(inject('pgUrl')).port || '5432';
      const started = Date.now();
      const res = await cli(['--url', `mysql://root@127.0.0.1:${pgPort}/test`, '--wait', '40', 'tag', 'list']);
      expectError(res, 'BAD_CONFIG', 2);
      expect(res.stderr).toMatch(/speaks PostgreSQL/);
      // Recognised, not waited out: mysql2 alone waits for a greeting until its connect timeout (--wait 40).
      expect(Date.now() - started).toBeLessThan(30_000);
    },
  },
  {
    why: 'postgres:// at a MySQL port is named as the wrong kind of server (not INTERNAL "unexpected copyData")',
    run: async () => {
      const myPort = new URL(inject('mysqlUrl')).port || '3306';
      const res = await cli(['--url', `postgres://postgres@127.0.0.1:${myPort}/test`, 'tag', 'list']);
      expectError(res, 'BAD_CONFIG', 2);
      expect(res.stderr).toMatch(/does not speak PostgreSQL/);
    },
  },
  {
    why: 'next --start without --create is refused on a server',
    run: async () => {
      const res = await cli(['--url', pg.url, 'next', 'order', '--start', '5']);
      expectError(res, 'BAD_ARGUMENT', 2);
      expect(res.stderr).toContain('--create');
    },
  },
  {
    why: 'migrate --shard without --next-id is refused and installs nothing',
    run: async () => {
      const scratch = await createTestDb('postgres', 'cli_users_shard');
      try {
        const res = await cli(['--url', scratch.url, 'migrate', '--no-segments', '--shard', '5']);
        expectError(res, 'BAD_CONFIG', 2);
        expect(res.stderr).toContain('--next-id');
        const fn = await scratch.knex.raw("SELECT count(*)::int AS n FROM pg_proc WHERE proname = 'next_id'");
        expect((fn.rows as Array<{ n: number }>)[0]!.n).toBe(0);
      } finally {
        await scratch.drop();
      }
    },
  },
  {
    why: 'tag bump --by -5 names --by',
    run: async () => {
      const res = await cli(['--url', pg.url, 'tag', 'bump', 'order', '--by', '-5']);
      expectError(res, 'BAD_ARGUMENT', 2);
      expect(res.stderr).toContain('--by must be');
      expect(res.stderr).not.toContain('--start');
    },
  },
  {
    why: 'set-step too large is BAD_ARGUMENT in CLI words',
    run: async () => {
      const res = await cli(['--url', pg.url, 'tag', 'set-step', 'order', '99999999999']);
      expectError(res, 'BAD_ARGUMENT', 2);
      expect(res.stderr).not.toContain('Example: step');
    },
  },
  {
    why: 'migrate --shard 5000 says the range of --shard',
    run: async () => {
      const res = await cli(['--url', pg.url, 'migrate', '--no-segments', '--next-id', '--shard', '5000']);
      expectError(res, 'BAD_CONFIG', 2);
      expect(res.stderr).toContain('--shard must be from 0 to 1023');
      expect(res.stderr).not.toContain('nextId.');
    },
  },
  {
    why: 'tickets status on an unmigrated server prints a CLI command, not migrate(knex, …)',
    run: async () => {
      const res = await cli(['tickets', 'status', '--server', pg.url, '--sequence', 'users_status']);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toContain(`Run \`idlease --url ${pg.url} migrate --no-segments --tickets users_status\` first.`);
      expect(res.stdout).not.toContain('migrate(knex');
    },
  },
  {
    why: 'a pglite: URL in capitals is a PGlite URL',
    run: async () => {
      const cwd = freshDir();
      const res = await cli(['--url', 'PGLITE:./db', 'next', 'order', '-n', '2'], {}, cwd);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toBe('1\n2\n');
    },
  },
  {
    why: 'migrate --down on a database idlease never touched creates nothing',
    run: async () => {
      const scratch = await createTestDb('postgres', 'cli_users_down');
      try {
        const res = await cli(['--url', scratch.url, 'migrate', '--down']);
        expect(res.code, res.stderr).toBe(0);
        expect(res.stdout).toContain('nothing to do');
        const schemas = await scratch.knex.raw("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = 'idlease'");
        expect((schemas.rows as Array<{ n: number }>)[0]!.n).toBe(0);
      } finally {
        await scratch.drop();
      }
    },
  },
  {
    why: 'workers list says "released" (not 1970-01-01) and shows the time bound as a date',
    run: async () => {
      for (const db of [pg, my]) {
        await cli(['--url', db.url, 'migrate', '--no-segments', '--workers']);
        const made = await cli(['--url', db.url, 'snowflake', 'next', '--group', 'users_list']);
        expect(made.code, made.stderr).toBe(0);
        const res = await cli(['--url', db.url, 'workers', 'list', '--group', 'users_list']);
        expect(res.code, res.stderr).toBe(0);
        expect(res.stdout).toContain('released');
        expect(res.stdout).not.toContain('1970');
        expect(res.stdout).toMatch(/IDs up to 20\d\d-/);
      }
    },
  },
  {
    why: 'tag bump --to below the current max_id says it did not lower it',
    run: async () => {
      await cli(['--url', pg.url, 'migrate']);
      await cli(['--url', pg.url, 'tag', 'add', 'bump_low', '--start', '107']);
      const res = await cli(['--url', pg.url, 'tag', 'bump', 'bump_low', '--to', '50']);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toMatch(/max_id 106, unchanged: already at or above 50/);
    },
  },
];

describe('what users type and read: each "Why" item', () => {
  it.concurrent.each(ROWS.map((r) => [r.why, r] as const))('%s', async (_why, row) => row.run(), 180_000);
});

/** The commands a message prints in backticks that start with `idlease`. */
function hintsOf(text: string): string[] {
  return [...text.matchAll(/`((?:npx )?idlease [^`]+)`/g)].map((m) => m[1]!);
}

/**
 * Run `line`; while it fails, run the first command its message prints (it must run as printed
 * and succeed), then run `line` again. Returns the hints followed and the final result.
 */
async function followHints(line: string, cwd: string, env: NodeJS.ProcessEnv = {}): Promise<{ hints: string[]; last: CliResult }> {
  const hints: string[] = [];
  for (let round = 0; round < 5; round++) {
    const res = await sh(line, cwd, env);
    if (res.code === 0) return { hints, last: res };
    const [hint] = hintsOf(res.stderr);
    expect(hint, `no runnable hint in: ${res.stderr}`).toBeDefined();
    expect(hint).not.toMatch(/<[^>]*>|embedded PGlite|\.\.\.|…/);
    const ran = await sh(hint!, cwd, env);
    expect(ran.code, `hint \`${hint}\` failed: ${ran.stderr}`).toBe(0);
    hints.push(hint!);
  }
  throw new Error(`still failing after 5 hints: ${line}`);
}

describe('every printed hint runs as printed, until the command succeeds', () => {
  it.concurrent.each([
    ['a tag with a space, --url on MySQL', 'mysql', (url: string) => `idlease --url '${url}' next 'my tag' -n 2`, undefined],
    ['a tag with a quote, $IDLEASE_URL on PostgreSQL', 'postgres', () => `idlease next "o'brien" -n 2`, 'IDLEASE_URL'],
    ['set-step of a missing tag, $DATABASE_URL on MySQL', 'mysql', () => "idlease tag set-step 'new tag' 50", 'DATABASE_URL'],
    ['tickets next on the embedded default', undefined, () => 'idlease tickets next -n 2', undefined],
  ] as const)(
    '%s',
    async (_name, flavor, line, variable) => {
      const scratch = flavor === undefined ? undefined : await createTestDb(flavor, 'cli_hints');
      try {
        const env = variable === undefined ? {} : { [variable]: scratch!.url };
        const { hints, last } = await followHints(line(scratch?.url ?? ''), freshDir(), env);
        expect(hints.length, 'no hint followed').toBeGreaterThan(0);
        expect(last.code).toBe(0);
      } finally {
        await scratch?.drop();
      }
    },
    240_000,
  );

  it("HTTP: a missing tag hints the command (never the URL), which run with the server's --url makes the request succeed; --tags, an empty tag and a repeated ?n= say what to fix", async () => {
    const scratch = await createTestDb('postgres', 'cli_serve_hints');
    try {
      await cli(['--url', scratch.url, 'migrate']);
      await cli(['--url', scratch.url, 'tag', 'add', 'a']);
      const all = await startServe(scratch.url);
      const some = await startServe(scratch.url, ['--tags', 'a']);
      try {
        const missing = await fetch(`${all.url}/api/segment/get/new%20tag`);
        expect(missing.status).toBe(404);
        const body = (await missing.json()) as { code: string; message: string };
        const [hint] = hintsOf(body.message);
        // The hint names the command, never the database URL (issue 35): the operator adds the server's --url.
        expect(hint).toBe(`idlease tag add 'new tag'`);
        expect(body.message).toContain('with the --url this server was started with');
        expect(body.message).not.toContain(new URL(scratch.url).host);
        const ran = await sh(hint!.replace('idlease ', `idlease --url ${scratch.url} `), freshDir());
        expect(ran.code, ran.stderr).toBe(0);
        await new Promise((r) => setTimeout(r, 1_100)); // the server looks for new tags at most once a second
        expect((await fetch(`${all.url}/api/segment/get/new%20tag`)).status).toBe(200);

        const notServed = (await (await fetch(`${some.url}/api/segment/get/new%20tag`)).json()) as { message: string };
        expect(notServed.message).toContain("restart it with --tags 'a,new tag'");
        expect(notServed.message).not.toContain('tag add');
        const empty = await fetch(`${all.url}/api/segment/get/`);
        expect(empty.status).toBe(400);
        expect(((await empty.json()) as { message: string }).message).not.toContain('tag add');
        const twice = await fetch(`${all.url}/v1/segment/a/ids?n=2&n=3`);
        expect(twice.status).toBe(400);
        expect(((await twice.json()) as { code: string }).code).toBe('BAD_ARGUMENT');
      } finally {
        await Promise.all([all.stop(), some.stop()]);
      }
    } finally {
      await scratch.drop();
    }
  }, 240_000);

  it('tickets reshard names the new server and its offset, and the hint run as printed lets reshard succeed', async () => {
    const [a, b] = await Promise.all([createTestDb('mysql', 'cli_reshard_a'), createTestDb('mysql', 'cli_reshard_b')]);
    try {
      const cwd = freshDir();
      const setup = await sh(`idlease --url '${a.url}' migrate --no-segments --tickets`, cwd);
      expect(setup.code, setup.stderr).toBe(0);
      const { hints } = await followHints(`idlease tickets reshard --server '${a.url}' --server '${b.url}'`, cwd);
      expect(hints).toEqual([`idlease --url ${b.url} migrate --no-segments --tickets default --tickets-increment 2 --tickets-offset 2`]);
    } finally {
      await Promise.all([a.drop(), b.drop()]);
    }
  }, 240_000);
});
