/**
 * Issue 38, items 5–8, 11, 12: what a CLI user types means what it says, and every hint runs as
 * printed. Hints are followed through `sh` as printed, for an installed `idlease` (a bin
 * directory on PATH) and for `npx idlease` (an app whose node_modules/.bin has it, run by npx),
 * against real MariaDB and PostgreSQL databases.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI_BIN, closedPort, REPO_ROOT, runCli, runNode, TSX_LOADER, type CliResult } from '../helpers/cli.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

let work: string;
let my: TestDb;
let pg: TestDb;
/** Environment without the URL variables, with `idlease` on PATH as an installed package has it. */
let env: NodeJS.ProcessEnv;
let app: string;

beforeAll(async () => {
  work = mkdtempSync(path.join(tmpdir(), 'idlease-lastmile-'));
  const bin = path.join(work, 'bin');
  mkdirSync(bin);
  symlinkSync(CLI_BIN, path.join(bin, 'idlease'));
  // An app that installed idlease: npx finds node_modules/.bin/idlease and runs it.
  app = path.join(work, 'app');
  mkdirSync(path.join(app, 'node_modules/.bin'), { recursive: true });
  writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true }));
  symlinkSync(CLI_BIN, path.join(app, 'node_modules/.bin/idlease'));
  const { IDLEASE_URL: _u, DATABASE_URL: _d, IDLEASE_TICKET_SERVERS: _t, npm_command: _n, ...rest } = process.env;
  env = {
    ...rest,
    PATH: `${bin}${path.delimiter}${process.env.PATH ?? ''}`,
    npm_config_cache: path.join(work, 'npm-cache'),
    npm_config_update_notifier: 'false',
  };
  [my, pg] = await Promise.all([createTestDb('mysql', 'lastmile'), createTestDb('postgres', 'lastmile')]);
});

afterAll(async () => {
  await Promise.all([my?.drop(), pg?.drop()]);
  if (work) rmSync(work, { recursive: true, force: true });
});

function sh(script: string, cwd: string): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', script], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const show = (r: CliResult) => `exit ${r.code}\n${r.stderr}\n${r.stdout}`;

/** The first `command` a message quotes. */
function hintIn(stderr: string): string {
  const m = /`((?:npx )?idlease [^`]+)`/.exec(stderr);
  if (!m) throw new Error(`no command in the message: ${stderr}`);
  return m[1]!;
}

const INVOCATIONS = [
  { how: 'an installed idlease', prefix: 'idlease', cwd: () => work },
  { how: 'npx idlease', prefix: 'npx idlease', cwd: () => app },
] as const;

describe('item 6: bare group commands print help only', () => {
  it.each(['', 'tag', 'tickets', 'redis', 'snowflake', 'workers', 'next-id'])('idlease %s', async (group) => {
    const r = await runCli(group === '' ? [] : [group], { cwd: work, env });
    expect(r.code, show(r)).toBe(2);
    expect(r.stdout).toMatch(new RegExp(`^Usage: idlease${group === '' ? '' : ` ${group}`} \\[options\\] \\[command\\]`));
    expect(r.stderr).toBe('');
  });
});

describe('item 7: hints start with the invocation the user typed and carry their --url', () => {
  it.each(INVOCATIONS)(
    'a missing table, then a missing tag, followed through sh ($how)',
    async ({ prefix, cwd }) => {
      // npx costs seconds a call: that invocation on PostgreSQL only, the installed one on both.
      for (const db of prefix === 'idlease' ? [my, pg] : [pg]) {
        const url = db.url;
        // A table of its own per invocation: each run meets the missing table first.
        const tag = `order --table seg_${prefix.length}`;
        const first = await sh(`${prefix} --url '${url}' next ${tag}`, cwd());
        expect(first.code, show(first)).not.toBe(0);
        const migrate = hintIn(first.stderr);
        expect(migrate.startsWith(`${prefix} --url `), migrate).toBe(true);
        const migrated = await sh(migrate, cwd());
        expect(migrated.code, `${migrate}\n${show(migrated)}`).toBe(0);
        const second = await sh(`${prefix} --url '${url}' next ${tag}`, cwd());
        expect(second.stderr).toMatch(/UNKNOWN_TAG/);
        const add = hintIn(second.stderr);
        expect(add.startsWith(`${prefix} --url `), add).toBe(true);
        const added = await sh(add, cwd());
        expect(added.code, `${add}\n${show(added)}`).toBe(0);
        const third = await sh(`${prefix} --url '${url}' next ${tag}`, cwd());
        expect(third.code, show(third)).toBe(0);
        expect(third.stdout.trim()).toBe('1');
      }
    },
    150_000,
  );

  it.each(INVOCATIONS)(
    'a ticket server on another increment: the hint gives the server its own scheme and runs, and offers no reshard of part of a set ($how)',
    async ({ prefix, cwd }) => {
      const seq = prefix === 'idlease' ? 'a' : 'b';
      const setup = await runCli(
        ['--url', my.url, 'migrate', '--no-segments', '--tickets', seq, '--tickets-increment', '2', '--tickets-offset', '1'],
        {
          env,
        },
      );
      expect(setup.code, show(setup)).toBe(0);
      const r = await sh(`${prefix} tickets next --server '${my.url}' --sequence ${seq}`, cwd());
      expect(r.code, show(r)).toBe(2);
      // The server may be one of two at increment 2: a reshard of it alone could repeat IDs (issue 42).
      expect(r.stderr).not.toMatch(/tickets reshard --server/);
      const fix = hintIn(r.stderr);
      expect(fix).toBe(`${prefix} tickets next --server ${my.url} --increment 2 --offsets 1 --sequence ${seq}`);
      const fixed = await sh(fix, cwd());
      expect(fixed.code, `${fix}\n${show(fixed)}`).toBe(0);
      expect(BigInt(fixed.stdout.trim()) % 2n).toBe(1n);
    },
  );

  it('--schema on MySQL is refused for next and tag as for migrate', async () => {
    for (const args of [
      ['next', 'order', '--schema', 'ids'],
      ['tag', 'add', 'order', '--schema', 'ids'],
      ['tag', 'list', '--schema', 'ids'],
    ]) {
      const r = await runCli(['--url', my.url, ...args], { env });
      expect(r.code, show(r)).toBe(2);
      expect(r.stderr).toMatch(/BAD_CONFIG: --schema applies to PostgreSQL only/);
    }
  });
});

describe('item 8: CLI words in CLI errors', () => {
  it.each([
    [['next', ''], /BAD_ARGUMENT: The tag "" must be 1 to 128 characters long, got 0/],
    [['next', 'x'.repeat(129)], /BAD_ARGUMENT: The tag "x{40}" must be 1 to 128 characters long, got 129/],
    [['tag', 'add', 'x'.repeat(129)], /BAD_ARGUMENT: The tag "x{40}" must be 1 to 128 characters long, got 129/],
    [['snowflake', 'next', '--group', ''], /BAD_CONFIG: --group must be 1 to 128 characters/],
    [['tag', 'bump'], /BAD_ARGUMENT: give a tag or --all/],
    [['next', 'order', '--step', '0'], /BAD_ARGUMENT: .*--step must be a positive integer/],
    [['next', 'order', '--step', '99999999999'], /BAD_ARGUMENT: .*--step must be at most 2147483647/],
    [['--url', 'pglite:', 'next', 'order'], /names no directory\. Use pglite:<dir> \(kept on disk\), or leave the URL out/],
  ])('%j', async (args, expected) => {
    const r = await runCli(['--lock-wait', '0', ...args], { cwd: work, env });
    expect(r.code, show(r)).toBe(2);
    expect(r.stderr).toMatch(expected);
    expect(r.stderr).not.toMatch(/tag: 'order'|group: 'orders'|bumpTag|create\.step|pglite:memory\./);
  });
});

describe('item 5: tags that look alike are refused the same way everywhere', () => {
  it.each(['order ', ' order', ' ', 'or\u200bder', 'order\u00a0x', 'caf\u0065\u0301', 'or\u2060der', '\ufefforder'])(
    'next %j is refused',
    async (tag) => {
      const cwd = mkdtempSync(path.join(work, 'tag-'));
      const r = await runCli(['next', tag], { cwd, env });
      expect(r.code, show(r)).toBe(2);
      expect(r.stderr).toMatch(/BAD_ARGUMENT: The tag /);
      if (tag.normalize('NFC') !== tag) expect(r.stderr).toContain(JSON.stringify(tag.normalize('NFC')));
    },
  );
});

describe('item 11 and 12', () => {
  it('a PostgreSQL URL naming no database is refused like a MySQL one', async () => {
    const u = new URL(pg.url);
    u.pathname = '';
    const r = await runCli(['--url', u.toString(), 'next', 'order'], { env });
    expect(r.code, show(r)).toBe(2);
    expect(r.stderr).toMatch(/BAD_CONFIG: .* names no database/);
  });

  it('connect() in a library app on a port nothing listens on prints nothing on stderr by itself', async () => {
    const port = await closedPort();
    const app = path.join(work, 'wrong-port.mts');
    writeFileSync(
      app,
      `import { connect } from ${JSON.stringify(path.join(REPO_ROOT, 'src/index.ts'))};
const knex = connect('postgres://postgres@127.0.0.1:${port}/app', { connectTimeoutMs: 2000 });
const err = await knex.raw('SELECT 1').then(() => undefined, (e) => e);
await knex.destroy();
process.stdout.write(err ? 'failed' : 'connected');`,
    );
    const r = await runNode(['--import', TSX_LOADER, app], { env });
    expect(r.stdout, show(r)).toBe('failed');
    expect(r.stderr).toBe('');
  });

  it('tickets reshard with no server is refused and makes no ./.idlease', async () => {
    const cwd = mkdtempSync(path.join(work, 'reshard-'));
    const r = await runCli(['tickets', 'reshard'], { cwd, env });
    expect(r.code, show(r)).toBe(2);
    expect(r.stderr).toMatch(/BAD_ARGUMENT: tickets reshard needs the ticket servers: `idlease tickets reshard --server/);
    expect(existsSync(path.join(cwd, '.idlease'))).toBe(false);
  });
});
