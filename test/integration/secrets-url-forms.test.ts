/**
 * Every spelling of a password in a URL that a user types unencoded: the CLI shows none of it,
 * in its human line, with --json or with --verbose (the driver's own log lines included), and
 * the forms no driver reads as typed are refused before any connection (BAD_CONFIG) instead of
 * connecting to a piece of the password and quoting it (`getaddrinfo ENOTFOUND <piece>`).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { IdleaseError } from '../../src/errors.js';
import { runCli } from '../helpers/cli.js';

const SECRET = /S3cr3t|Pw0rd|de@|ENOTFOUND/;
// A directory of its own: nothing here may fall back to an embedded database in the checkout.
const cwd = mkdtempSync(path.join(tmpdir(), 'idlease-secret-forms-'));
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

/** Run `tag list` on `url` plain, with --json and with --verbose: each refused as BAD_CONFIG, none showing the secret. */
async function refusedEverywhere(url: string): Promise<string[]> {
  const lines: string[] = [];
  for (const extra of [[], ['--json'], ['--verbose']]) {
    const r = await runCli(['--url', url, '--wait', '2', ...extra, 'tag', 'list'], { cwd });
    const out = r.stdout + r.stderr;
    expect(out, out).not.toMatch(SECRET);
    expect(r.code, out).toBe(2);
    expect(r.stderr).toMatch(/^idlease: BAD_CONFIG: /);
    lines.push(r.stderr.split('\n')[0]!);
  }
  return lines;
}

it('a password of digits then ? (read as a port by the URL parser) is not shown and the URL is refused', async () => {
  const [line] = await refusedEverywhere('postgres://admin:1234?S3cr3tPW@db.internal:5432/app');
  expect(line).toContain('postgres://***@db.internal:5432/app');
  expect(line).toMatch(/percent-encode/);
});

it('a password starting with ? on a MySQL URL naming no database is not shown (once or twice)', async () => {
  const [line] = await refusedEverywhere('mysql://admin:?S3cr3tPW@127.0.0.1/');
  expect(line).toContain('mysql://***@127.0.0.1/');
});

it('a password with an unencoded @ then / is refused before connecting: no getaddrinfo naming a piece of it', async () => {
  for (const url of ['postgres://u:ab@c/de@127.0.0.1:5432/app', 'mysql://u:ab@c/de@127.0.0.1:3306/app']) {
    const [line] = await refusedEverywhere(url);
    expect(line).toMatch(/holds an @/);
  }
});

it('an authority with two @ is refused by connect() too, its error not echoing the URL', () => {
  let err: unknown;
  try {
    connect('mysql://u:Pw0rd@x@127.0.0.1:3306/app');
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(IdleaseError);
  expect((err as IdleaseError).code).toBe('BAD_CONFIG');
  expect((err as IdleaseError).message).not.toMatch(SECRET);
  expect((err as IdleaseError).message).toContain('mysql://***@127.0.0.1:3306/app');
});

it("an unknown option's value is not echoed", async () => {
  for (const args of [
    ['--urll=postgres://u:S3cr3tPW@127.0.0.1/db', 'next', 'x'],
    ['next', 'x', '--tokn=S3cr3tPW'],
  ]) {
    const r = await runCli(args, { cwd });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown option '--(urll|tokn)=…'/);
    expect(r.stderr + r.stdout).not.toMatch(SECRET);
  }
});
