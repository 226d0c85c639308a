/**
 * No secret in any output: a whole CLI and serve session on MariaDB with a user whose password
 * holds @ / : % (percent-encoded in the URL, as every driver wants it), and a serve token. No
 * line on stdout or stderr (human, --json, errors), no log line, no HTTP body and no lock file
 * holds the password (in either spelling) or the token.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';
import { startServe } from '../helpers/serve-process.js';

const PASSWORD = 'Zq9@pw/x:y%Sec';
const TOKEN = 'TokQ7xSECRETtok';
/** What must never show: the distinctive part of the password (in any spelling) and the token. */
const LEAKS = [/Zq9/, /pw\/x|pw%2Fx/i, /TokQ7x/];

let db: TestDb;
let url: string;
const seen: string[] = [];

beforeAll(async () => {
  db = await createTestDb('mysql', 'secrets');
  const database = new URL(db.url).pathname.slice(1);
  await db.knex.raw(`CREATE USER IF NOT EXISTS 'idl_secret'@'%' IDENTIFIED BY ?`, [PASSWORD]);
  await db.knex.raw(`GRANT ALL ON \`${database}\`.* TO 'idl_secret'@'%'`);
  const u = new URL(db.url);
  u.username = 'idl_secret';
  u.password = encodeURIComponent(PASSWORD);
  url = u.toString();
});

afterAll(async () => {
  await db.knex.raw(`DROP USER IF EXISTS 'idl_secret'@'%'`);
  await db.drop();
});

async function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const r = await runCli(args, { env });
  // The command itself is not output: only what idlease wrote.
  seen.push(`${r.stdout}${r.stderr}`);
  return r;
}

it('a full CLI and serve session prints, logs, answers and stores neither the password nor the token', { timeout: 300_000 }, async () => {
  // Success lines, human and --json.
  expect((await cli(['--url', url, 'migrate'])).code).toBe(0);
  expect((await cli(['--url', url, 'migrate'])).code).toBe(0); // "nothing to do on …"
  expect((await cli(['--url', url, 'tag', 'add', 'order'])).code).toBe(0);
  expect((await cli(['--url', url, '--json', 'tag', 'add', 'invoice'])).code).toBe(0);
  expect((await cli(['--url', url, 'tag', 'list'])).code).toBe(0);
  expect((await cli(['--url', url, '--json', 'next', 'order', '-n', '2'])).code).toBe(0);
  // The URL from the environment, as the docs' units pass it.
  expect((await cli(['next', 'order'], { IDLEASE_URL: url })).code).toBe(0);
  // Errors: an unknown tag, a wrong database, a wrong password, an unencoded password the parser refuses.
  expect((await cli(['--url', url, 'next', 'nope'])).code).not.toBe(0);
  const wrongDb = new URL(url);
  wrongDb.pathname = '/idl_no_such_db';
  expect((await cli(['--url', wrongDb.toString(), 'tag', 'list'])).code).toBe(2);
  expect((await cli(['--url', url.replace('Sec', 'Bad'), '--verbose', 'tag', 'list'])).code).toBe(2);
  const raw = url.replace(encodeURIComponent(PASSWORD), PASSWORD);
  expect((await cli(['--url', raw, 'tag', 'list'])).code).not.toBe(0);
  expect((await cli(['--url', raw, '--json', 'tag', 'list'])).code).not.toBe(0);
  expect((await cli(['tickets', 'status'], { IDLEASE_TICKET_SERVERS: url })).code).not.toBeNull();

  // serve: URL and token from the environment; every log line and HTTP body collected.
  const serve = await startServe(url, [], { IDLEASE_TOKEN: TOKEN });
  const auth = { authorization: `Bearer ${TOKEN}` };
  for (const [p, headers, init] of [
    ['/api/segment/get/order', auth, {}],
    ['/v1/segment/order/ids?n=5', auth, {}],
    ['/api/segment/get/order', {}, {}],
    ['/api/segment/get/nope', auth, {}],
    ['/v1/segment/order/lease?step=10', auth, { method: 'POST' }],
    ['/readyz', {}, {}],
    ['/readyz', auth, {}],
    ['/metrics', {}, {}],
    ['/api/snowflake/get/x', auth, {}],
  ] as const) {
    const r = await fetch(serve.url + p, { ...init, headers });
    seen.push(`HTTP ${p} ${r.status} ${JSON.stringify([...r.headers])} ${await r.text()}`);
  }
  await serve.stop();
  seen.push(serve.stderr());

  // serve on an embedded directory with --token on argv: its lock file, while it runs.
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-secrets-'));
  try {
    const embedded = await startServe(`pglite:${path.join(dir, 'db')}`, ['--token', TOKEN]);
    seen.push(readFileSync(path.join(dir, 'db.lock'), 'utf8'));
    const next = await cli(['--url', `pglite:${path.join(dir, 'db')}`, 'next', 'order']);
    expect(next.code, next.stderr).toBe(0);
    await embedded.stop();
    seen.push(embedded.stderr());
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }

  const all = seen.join('\n');
  expect(all).toContain('idl_secret'); // the user name is shown: the URLs are there, redacted
  for (const leak of LEAKS)
    expect(
      all,
      `output matching ${leak}:\n${all
        .split('\n')
        .filter((l) => leak.test(l))
        .join('\n')}`,
    ).not.toMatch(leak);
});
