/**
 * Beside an `idlease serve` on an embedded directory, the commands that need the database itself
 * (tag list, tag add, migrate, snowflake next) answer at once — DB_LOCKED naming serve, its
 * process and what to do — instead of waiting out --lock-wait for a lock serve keeps for its
 * whole life. And `cd src && idlease next order` in a project whose root holds the embedded
 * database is refused, naming it, instead of silently making a second one whose IDs repeat.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { startServe } from '../helpers/serve-process.js';

const root = mkdtempSync(path.join(tmpdir(), 'idlease-lock-serve-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

it(
  'tag list, tag add, migrate and snowflake next beside a serve answer at once: DB_LOCKED naming serve',
  { timeout: 120_000 },
  async () => {
    const url = `pglite:${path.join(root, 'served')}`;
    const serve = await startServe(url);
    try {
      const commands = [['tag', 'list'], ['tag', 'add', 'invoice'], ['migrate'], ['snowflake', 'next']];
      // --lock-wait 600: a command that waited for the lock would be killed (code null) at 60 s.
      const results = await Promise.all(
        commands.map((args) => runCli(['--url', url, '--lock-wait', '600', ...args], { cwd: root, timeoutMs: 60_000 })),
      );
      for (const [i, r] of results.entries()) {
        const what = commands[i]!.join(' ');
        expect(r.code, `${what}: ${r.stderr}`).toBe(1);
        const lines = r.stderr.trim().split('\n');
        expect(lines, what).toHaveLength(1);
        expect(lines[0], what).toMatch(/^idlease: DB_LOCKED: .*held by idlease serve/);
        expect(lines[0], what).toContain(`kill -TERM ${serve.child.pid}`);
        expect(lines[0], what).toContain('--url');
      }
    } finally {
      await serve.stop();
    }
  },
);

it(
  "idlease in a project's subdirectory is refused, naming the project's database, instead of making a second one",
  { timeout: 120_000 },
  async () => {
    const project = path.join(root, 'project');
    const src = path.join(project, 'src');
    mkdirSync(src, { recursive: true });
    writeFileSync(path.join(project, 'package.json'), '{"name":"app","private":true}\n');
    const atRoot = await runCli(['next', 'order'], { cwd: project, env: { IDLEASE_URL: undefined, DATABASE_URL: undefined } });
    expect(atRoot.code, atRoot.stderr).toBe(0);
    expect(atRoot.stdout.trim()).toBe('1');
    const inSrc = await runCli(['next', 'order'], { cwd: src, env: { IDLEASE_URL: undefined, DATABASE_URL: undefined } });
    expect(inSrc.code, inSrc.stderr).toBe(2);
    expect(inSrc.stdout).toBe('');
    expect(inSrc.stderr).toMatch(
      /^idlease: BAD_CONFIG: There is no embedded database in \.\/\.idlease\/pglite\/ here, but the project's is in /,
    );
    expect(inSrc.stderr).toContain(path.join(project, '.idlease', 'pglite'));
    expect(existsSync(path.join(src, '.idlease'))).toBe(false);
    // The hint's --url reaches the project's database: the IDs go on.
    const named = await runCli(['--url', `pglite:${path.join(project, '.idlease', 'pglite')}`, 'next', 'order'], { cwd: src });
    expect(named.code, named.stderr).toBe(0);
    expect(named.stdout.trim()).toBe('2');
  },
);
