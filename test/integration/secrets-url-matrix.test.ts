/**
 * One redaction for every URL (issue 43 item 5), as a table: 11 spellings of a password a user
 * types into a URL (encoded or not: @ / ? # % %zz : and mixes) × every kind of URL idlease reads
 * (postgres://, mysql://, redis://, redis+cluster://) × a host that answers, one that refuses, one
 * that does not resolve × the CLI's output modes (plain, --json, --verbose) and the environment
 * variable instead of the flag. No piece of the password appears in anything the CLI writes, and
 * a malformed escape is BAD_CONFIG, never `INTERNAL: URI malformed`. The answering hosts are the
 * shared servers (PostgreSQL trusts the user, so such a run may succeed: it must still show no
 * password).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { runMain, runMainIsolated } from '../helpers/in-process.js';

// Each password carries the same two markers around its special characters: any piece of it
// that shows is one of them (or the special part between, which holds a third).
const PIECES = ['Hq7v', 'Zk9w', 'Mx3p'];
const SPELLINGS = [
  'Hq7v@Mx3pZk9w', // @ unencoded
  'Hq7v/Mx3pZk9w', // /
  'Hq7v?Mx3pZk9w', // ? (read as a query)
  'Hq7v#Mx3pZk9w', // # (read as a fragment)
  'Hq7v%Mx3pZk9w', // a lone %
  'Hq7v%zzMx3pZk9w', // %zz: no escape
  'Hq7v:Mx3pZk9w', // :
  '1234?Hq7vMx3pZk9w', // digits then ? (read as a port)
  'Hq7v@Mx3p/Zk9w', // @ and /
  'Hq7v%40Mx3p%2FZk9w', // encoded as it should be (ENCODED)
  ':Hq7vMx3p@Zk9w', // a leading :
];

const ENCODED = 'Hq7v%40Mx3p%2FZk9w';

type Kind = 'postgres' | 'mysql' | 'redis' | 'redis+cluster';
const KINDS: Kind[] = ['postgres', 'mysql', 'redis', 'redis+cluster'];
const HOSTS = {
  answers: { postgres: '127.0.0.1:5432', mysql: '127.0.0.1:3306', redis: '127.0.0.1:6379' },
  refuses: { postgres: '127.0.0.1:1', mysql: '127.0.0.1:1', redis: '127.0.0.1:1' },
  unresolvable: { postgres: 'nohost.invalid:5432', mysql: 'nohost.invalid:3306', redis: 'nohost.invalid:6379' },
} as const;

function urlOf(kind: Kind, password: string, host: keyof typeof HOSTS): string {
  const h = HOSTS[host];
  switch (kind) {
    case 'postgres':
      return `postgres://postgres:${password}@${h.postgres}/test`;
    case 'mysql':
      return `mysql://root:${password}@${h.mysql}/test`;
    case 'redis':
      return `redis://:${password}@${h.redis}`;
    case 'redis+cluster':
      return `redis+cluster://:${password}@${h.redis},${h.redis.replace(/:\d+$/, ':2')}`;
  }
}

const DB = 'postgres://postgres@127.0.0.1:5432/test';
/** The command that reads the URL: a database command, or a Redis one that needs no database. */
function command(kind: Kind, url: string, mode: string[]): string[] {
  const common = ['--wait', '1', ...mode];
  return kind === 'postgres' || kind === 'mysql'
    ? ['--url', url, ...common, 'tag', 'list']
    : ['--url', DB, ...common, 'redis', 'status', 'order', '--redis-url', url];
}

let cwd: string;
const before = process.cwd();
beforeAll(() => {
  // A directory of its own: nothing may fall back to an embedded database in the checkout.
  cwd = mkdtempSync(path.join(tmpdir(), 'idlease-url-matrix-'));
  process.chdir(cwd);
});
afterAll(() => {
  process.chdir(before);
  rmSync(cwd, { recursive: true, force: true });
});

function leaks(text: string): string[] {
  return PIECES.filter((p) => text.includes(p));
}

it('11 password spellings × 4 URL kinds × 3 hosts × plain, --json, --verbose: no piece of a password in any output; a malformed escape is BAD_CONFIG', async () => {
  const cases: Array<{ kind: Kind; password: string; host: keyof typeof HOSTS; mode: string[] }> = [];
  for (const kind of KINDS)
    for (const password of SPELLINGS)
      for (const host of Object.keys(HOSTS) as Array<keyof typeof HOSTS>)
        for (const mode of [[], ['--json'], ['--verbose']]) cases.push({ kind, password, host, mode });
  const found: string[] = [];
  let internal = 0;
  // Eight at a time: each run is mostly a refused or failed connection.
  for (let i = 0; i < cases.length; i += 8) {
    const batch = cases.slice(i, i + 8);
    const results = await Promise.all(batch.map((c) => runMainIsolated(command(c.kind, urlOf(c.kind, c.password, c.host), c.mode))));
    results.forEach((r, j) => {
      const c = batch[j]!;
      const out = r.out + r.err;
      const what = `${c.kind} ${JSON.stringify(c.password)} ${c.host} ${c.mode.join(' ') || 'plain'}`;
      if (leaks(out).length > 0) found.push(`${what}: ${out.slice(0, 300)}`);
      if (/INTERNAL|URI malformed/.test(out)) internal++;
      if (c.password.includes('%zz') || /%(?![0-9a-f]{2})/i.test(c.password)) {
        expect(r.err, `${what}: ${out}`).toMatch(/BAD_CONFIG/);
      }
      // A password encoded as it should be is read, never refused for its form.
      if (c.password === ENCODED) expect(r.err, `${what}: ${out}`).not.toMatch(/percent-encode|holds an @|starts no percent-escape/);
    });
  }
  console.log(`URL matrix: ${cases.length} cases, ${found.length} leaks, ${internal} INTERNAL`);
  expect(found, found.slice(0, 5).join('\n')).toEqual([]);
  expect(internal).toBe(0);
}, 600_000);

it('the same URLs from the environment ($DATABASE_URL, $IDLEASE_REDIS_URL): no piece of a password', async () => {
  const found: string[] = [];
  let cases = 0;
  for (const kind of KINDS)
    for (const password of SPELLINGS) {
      const url = urlOf(kind, password, 'refuses');
      const database = kind === 'postgres' || kind === 'mysql';
      const saved = { db: process.env.DATABASE_URL, redis: process.env.IDLEASE_REDIS_URL };
      if (database) process.env.DATABASE_URL = url;
      else process.env.IDLEASE_REDIS_URL = url;
      try {
        const r = await runMain(database ? ['--wait', '1', 'tag', 'list'] : ['--url', DB, '--wait', '1', 'redis', 'status', 'order']);
        cases++;
        if (leaks(r.out + r.err).length > 0) found.push(`${kind} ${JSON.stringify(password)}: ${(r.out + r.err).slice(0, 300)}`);
        expect(r.err).not.toMatch(/INTERNAL|URI malformed/);
      } finally {
        if (saved.db === undefined) delete process.env.DATABASE_URL;
        else process.env.DATABASE_URL = saved.db;
        if (saved.redis === undefined) delete process.env.IDLEASE_REDIS_URL;
        else process.env.IDLEASE_REDIS_URL = saved.redis;
      }
    }
  console.log(`URL matrix from the environment: ${cases} cases, ${found.length} leaks`);
  expect(found, found.slice(0, 5).join('\n')).toEqual([]);
}, 300_000);
