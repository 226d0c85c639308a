/**
 * Every CLI failure is one line `idlease: CODE: message` on stderr, with the exit code
 * ERROR_CATEGORIES gives; setup mistakes (wrong password, unknown database, missing ticket
 * objects, options that do not apply) are named at once. Real processes, real servers.
 */
import { createServer } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { closedPort, REPO_ROOT, runCli, withUrl, type CliResult } from '../helpers/cli.js';
import { exitCodeOf } from '../../src/cli/main.js';
import { createTicketAllocator } from '../../src/ticket/allocator.js';
import { migrate } from '../../src/migrations/migrate.js';
import { ERROR_CATEGORIES, IdleaseError, type IdleaseErrorCode } from '../../src/errors.js';

function expectOneLine(res: CliResult, code: string, exit: number): void {
  expect(res.stderr, res.stderr).toMatch(new RegExp(`^idlease: ${code}: [^\\n]+\\n$`));
  expect(res.code, res.stderr).toBe(exit);
  expect(res.stdout).toBe('');
}

describe('CLI errors: one line, the right code, at once', () => {
  let dir: string;
  let my: TestDb;
  let pg: TestDb;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-cli-errors-'));
    [my, pg] = await Promise.all([createTestDb('mysql', 'cli_err'), createTestDb('postgres', 'cli_err')]);
  });
  afterAll(async () => {
    await Promise.all([my?.drop(), pg?.drop()]);
    rmSync(dir, { recursive: true, force: true });
  });

  it.concurrent.each([
    [['next', 'order', '-n', '0']],
    [['tickets', 'next', '-n', '0']],
    [['migrate', '--bogus']],
    [['nonsense']],
    [['next']],
    [['--url', 'pglite:memory', 'tag', 'set-step', 'order', '0']],
  ])('argument errors are one BAD_ARGUMENT line, exit 2: %j', async (args) => {
    expectOneLine(await runCli(args, { cwd: dir }), 'BAD_ARGUMENT', 2);
  });

  it('every error code has the exit code of its category (client/config 2, else 1)', () => {
    for (const [code, category] of Object.entries(ERROR_CATEGORIES) as Array<[IdleaseErrorCode, string]>) {
      expect(exitCodeOf(new IdleaseError(code, 'x')), code).toBe(category === 'client' || category === 'config' ? 2 : 1);
    }
  });

  it("the README's exit-code list names every code under the exit code the CLI gives it", () => {
    const readme = readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
    const bullet = readme.slice(readme.indexOf('Exit codes follow'), readme.indexOf('\n- ', readme.indexOf('Exit codes follow')));
    const two = bullet.slice(bullet.indexOf('`2`'), bullet.indexOf('`1`'));
    const one = bullet.slice(bullet.indexOf('`1`'));
    for (const code of Object.keys(ERROR_CATEGORIES) as IdleaseErrorCode[]) {
      const listed = exitCodeOf(new IdleaseError(code, 'x')) === 2 ? two : one;
      expect(listed, `README lists ${code} under exit ${exitCodeOf(new IdleaseError(code, 'x'))}`).toContain('`' + code + '`');
    }
  });

  it('a wrong password, a user or role that does not exist, or an unknown database fails at once from next, tickets, migrate and serve as BAD_CONFIG naming the cause, not DB_UNAVAILABLE', async () => {
    const cases: Array<[string, RegExp]> = [
      [
        withUrl(my.url, (u) => {
          u.password = 'wrong-password';
        }),
        /access denied/,
      ],
      // A user that does not exist, no password: MariaDB answers it as the plugin it picks from the
      // name's hash would (so that a probe cannot tell which users exist): 1698 for this name, not 1045.
      [
        withUrl(inject('mysqlUrl'), (u) => {
          u.username = 'nosuchuser';
        }),
        /access denied/,
      ],
      // A role that does not exist: PostgreSQL answers 28000.
      [
        withUrl(inject('pgUrl'), (u) => {
          u.username = 'idl_no_such_role';
        }),
        /access denied/,
      ],
      [
        withUrl(inject('mysqlUrl'), (u) => {
          u.pathname = '/idl_no_such_database';
        }),
        /unknown database/,
      ],
      [
        withUrl(inject('pgUrl'), (u) => {
          u.pathname = '/idl_no_such_database';
        }),
        /unknown database/,
      ],
    ];
    const runs = cases.flatMap(([url, why]) =>
      [['next', 'order'], ['tickets', 'next'], ['migrate'], ['serve', '--port', '0']].map(async (args) => ({
        why,
        res: await runCli(['--url', url, ...args], { cwd: dir }),
      })),
    );
    for (const { why, res } of await Promise.all(runs)) {
      expectOneLine(res, 'BAD_CONFIG', 2);
      expect(res.stderr, res.stderr).toMatch(why);
      expect(res.stderr).not.toContain('wrong-password');
    }
  });

  it('an unreachable server: one DB_UNAVAILABLE line; knex log lines and stack traces only with --verbose', async () => {
    const url = `mysql://root@127.0.0.1:${await closedPort()}/x`;
    const [quiet, verbose] = await Promise.all([
      runCli(['--url', url, 'next', 'order'], { cwd: dir }),
      runCli(['--verbose', '--url', url, 'next', 'order'], { cwd: dir }),
    ]);
    expectOneLine(quiet, 'DB_UNAVAILABLE', 1);
    expect(verbose.code).toBe(1);
    expect(verbose.stderr).toMatch(/^idlease: DB_UNAVAILABLE: /m);
    expect(verbose.stderr).toContain('knex: ');
    expect(verbose.stderr).toContain('ECONNREFUSED');
  });

  it('an unmigrated ticket server is NOT_MIGRATED at once, in tickets next and in reshard', async () => {
    for (const db of [my, pg]) {
      const next = await runCli(['tickets', 'next', '--server', db.url], { cwd: dir });
      expectOneLine(next, 'NOT_MIGRATED', 2);
      // The hint runs against that server, as printed.
      expect(next.stderr).toContain(`\`idlease --url ${db.url} migrate --no-segments --tickets default\``);
      const status = await runCli(['--json', 'tickets', 'status', '--server', db.url], { cwd: dir });
      expect(status.code, status.stderr).toBe(0);
      expect((JSON.parse(status.stdout) as { servers: Array<{ health: string; error: string }> }).servers[0]).toMatchObject({
        health: 'refused',
        error: expect.stringContaining('missing'),
      });
    }
    // One migrated server, one new one that was not: reshard names the new one and changes nothing.
    const a = await runCli(['--url', my.url, 'migrate', '--no-segments', '--tickets'], { cwd: dir });
    expect(a.code, a.stderr).toBe(0);
    const scratch = await createTestDb('mysql', 'cli_err_new');
    try {
      const re = await runCli(['tickets', 'reshard', '--server', my.url, '--server', scratch.url], { cwd: dir });
      expectOneLine(re, 'NOT_MIGRATED', 2);
      expect(re.stderr).toContain(new URL(scratch.url).pathname.slice(1));
      expect(re.stderr).toContain('--tickets-increment 2 --tickets-offset');
      const still = await runCli(['--json', 'tickets', 'next', '--server', my.url], { cwd: dir });
      expect(still.code, still.stderr).toBe(0);
    } finally {
      await scratch.drop();
    }
  });

  it('the ticket allocator refuses an unmigrated server without waiting out its timeout', async () => {
    for (const flavor of ['mysql', 'postgres'] as const) {
      const scratch = await createTestDb(flavor, 'tick_unmigrated');
      // A 10-minute bound: only an immediate NOT_MIGRATED finishes inside the test's 60 s.
      const alloc = createTicketAllocator({ servers: [{ knex: scratch.knex, offset: 1 }], increment: 1, timeoutMs: 600_000 });
      try {
        await expect(alloc.next()).rejects.toMatchObject({ code: 'NOT_MIGRATED' });
        expect(alloc.stats().servers[0]!.health).toBe('refused');
      } finally {
        await alloc.close();
        await scratch.drop();
      }
    }
  });

  it('options that do not apply are refused: --tickets-engine on PostgreSQL/PGlite, --tickets-* without --tickets', async () => {
    // The PGlite directory exists first: a command that creates one says so in a line of its own.
    const made = await runCli(['--url', `pglite:${path.join(dir, 'pgl')}`, 'migrate'], { cwd: dir });
    expect(made.code, made.stderr).toBe(0);
    const refused = await Promise.all(
      [pg.url, `pglite:${path.join(dir, 'pgl')}`].map((url) =>
        runCli(['--url', url, 'migrate', '--no-segments', '--tickets', '--tickets-engine', 'MyISAM'], { cwd: dir }),
      ),
    );
    for (const res of refused) {
      expectOneLine(res, 'BAD_CONFIG', 2);
      expect(res.stderr).toContain('MySQL/MariaDB only');
    }
    expectOneLine(
      await runCli(['--url', `pglite:${path.join(dir, 'pgl')}`, 'migrate', '--tickets-offset', '2'], { cwd: dir }),
      'BAD_CONFIG',
      2,
    );
    // Still accepted where it applies.
    const ok = await runCli(['--url', my.url, 'migrate', '--no-segments', '--tickets', 'myisam_seq', '--tickets-engine', 'MyISAM'], {
      cwd: dir,
    });
    expect(ok.code, ok.stderr).toBe(0);
  });

  it('MIGRATION_FAILED is one line, without knex log lines', async () => {
    const up = await runCli(['--url', pg.url, 'migrate', '--no-segments', '--next-id'], { cwd: dir });
    expect(up.code, up.stderr).toBe(0);
    await pg.knex.raw('CREATE TABLE uses_next_id (id bigint DEFAULT public.next_id())');
    const down = await runCli(['--url', pg.url, 'migrate', '--down', '--no-segments', '--next-id'], { cwd: dir });
    expectOneLine(down, 'MIGRATION_FAILED', 2);
    expect(down.stderr).toContain('uses_next_id.id');
    expect(down.stderr).toContain('rerun with --drop-dependent-defaults');
    expect(down.stderr).not.toContain('dropDependentDefaults');
  });

  it('real processes: a closed port is DB_UNAVAILABLE exit 1 for tag list, workers list and migrate; serve on a busy port is BAD_CONFIG exit 2; tickets status with every server down exits 1', async () => {
    const url = `postgres://postgres@127.0.0.1:${await closedPort()}/x`;
    await migrate(my.knex); // serve needs the segment table on a server
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    try {
      const port = (busy.address() as { port: number }).port;
      const [list, workers, mig, serve, status] = await Promise.all([
        runCli(['--url', url, 'tag', 'list'], { cwd: dir }),
        runCli(['--url', url, 'workers', 'list'], { cwd: dir }),
        runCli(['--url', url, 'migrate'], { cwd: dir }),
        runCli(['--url', my.url, 'serve', '--port', String(port)], { cwd: dir, timeoutMs: 30_000 }),
        runCli(['tickets', 'status', '--server', url], { cwd: dir }),
      ]);
      for (const res of [list, workers, mig, status]) {
        expectOneLine(res, 'DB_UNAVAILABLE', 1);
        expect(res.stderr).not.toContain('report it');
      }
      expect(mig.stderr).toContain('--wait');
      expectOneLine(serve, 'BAD_CONFIG', 2);
      expect(serve.stderr).toContain('already in use');
    } finally {
      busy.close();
    }
  });

  it('a hint names the database the way the user did: $IDLEASE_URL is said, not inlined; an older install is named only where one is found', async () => {
    const scratch = await createTestDb('postgres', 'cli_err_hint');
    try {
      const fromEnv = await runCli(['next', 'order'], { cwd: dir, env: { IDLEASE_URL: scratch.url } });
      expectOneLine(fromEnv, 'NOT_MIGRATED', 2);
      expect(fromEnv.stderr).toContain('Run `idlease migrate` first.');
      expect(fromEnv.stderr).toContain('$IDLEASE_URL');
      expect(fromEnv.stderr).not.toContain(scratch.url);
      expect(fromEnv.stderr).not.toMatch(/older idlease/);
      // An install an older idlease left in public: now, and only now, the sentence appears.
      await scratch.knex.raw('CREATE TABLE public.idlease_segments (tag varchar(128) PRIMARY KEY, max_id bigint NOT NULL)');
      const older = await runCli(['--url', scratch.url, 'next', 'order'], { cwd: dir });
      expectOneLine(older, 'NOT_MIGRATED', 2);
      expect(older.stderr).toContain(`\`idlease --url ${scratch.url} migrate\` first. An older idlease installed it in schema public`);
      expect(older.stderr).toContain('--schema public');
    } finally {
      await scratch.drop();
    }
  });
});
