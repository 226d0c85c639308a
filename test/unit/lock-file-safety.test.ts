/**
 * The embedded directory's lock file holds a serve's URL and run secret: it follows no
 * symlink (a `<dir>.lock → victim` link truncated the victim before), is the owner's only on
 * every open (a pre-existing 0644 file stayed world-readable), and its `command` field carries
 * no secret from argv.
 */
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { acquireDirectoryLock, scrubArgs } from '../../src/embedded/lock.js';
import { IdleaseError } from '../../src/errors.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'idlease-lockfile-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

it('a symlink in place of the lock file is refused (BAD_CONFIG) and its target left as it was', async () => {
  const victim = path.join(dir, 'victim.txt');
  writeFileSync(victim, 'precious');
  symlinkSync(victim, path.join(dir, 'db.lock'));
  const err = await acquireDirectoryLock(path.join(dir, 'db'), { timeoutMs: 0 }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(IdleaseError);
  expect((err as IdleaseError).code).toBe('BAD_CONFIG');
  expect(readFileSync(victim, 'utf8')).toBe('precious');
});

it('a lock file made earlier with mode 0644 is 0600 once opened', async () => {
  const file = path.join(dir, 'db.lock');
  writeFileSync(file, '');
  chmodSync(file, 0o644);
  const lock = await acquireDirectoryLock(path.join(dir, 'db'), { timeoutMs: 0 });
  expect(statSync(file).mode & 0o777).toBe(0o600);
  lock!.release();
  expect(existsSync(file)).toBe(true);
});

it('the command field keeps no token or URL password from argv', () => {
  const args = scrubArgs([
    '--url',
    'mysql://u:hunter2@db/app',
    'serve',
    '--token',
    'tok123SECRET',
    '--token=tok456SECRET',
    '--url=postgres://u:p%40ss@h/db',
    '--token-file',
    '/etc/idlease/token',
  ]);
  const text = args.join(' ');
  expect(text).not.toMatch(/hunter2|tok123SECRET|tok456SECRET|p%40ss/);
  expect(text).toContain('/etc/idlease/token');
  expect(text).toContain('mysql://***@db/app');
});

it('the command field keeps no password typed with ?, # or a percent-escaped parameter name', () => {
  const text = scrubArgs([
    '--url',
    'mysql://u:hun?ter2@db/app',
    '--url=postgres://u:hun#ter3@h/db',
    'postgres://u@h/db?pass%77ord=hunter4&sslmode=require',
    'mysql://u@h/db?sslpassword=hunter5',
  ]).join(' ');
  expect(text).not.toMatch(/hun|ter[2-5]/);
  expect(text).toContain('mysql://***@db/app');
  expect(text).toContain('sslmode=require');
});
