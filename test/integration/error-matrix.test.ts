/**
 * Every error right, for every command: each CLI command and each library entry point against
 * each way the environment can be wrong (a closed port, an unknown host, a wrong password, an
 * unknown database, an unmigrated database, a busy port for serve, bad flags). Each gives the
 * documented code and exit status (README "CLI", ERROR_CATEGORIES), one line, never INTERNAL,
 * and a command in a hint carries the user's connection flags. The CLI runs in this process
 * (main(), output captured per call) so the whole table runs at once; test/integration/
 * cli-errors.test.ts runs the same paths as real processes.
 *
 * Wrong password: PostgreSQL here trusts every local connection (pg_hba: trust), so a password
 * is never checked; that fault runs on MariaDB only.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';
import { isIdleaseError, type IdleaseErrorCode } from '../../src/errors.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, bumpTag, listTags, setStep } from '../../src/segment/admin.js';
import { createSegmentAllocator } from '../../src/segment/allocator.js';
import { createTicketAllocator } from '../../src/ticket/allocator.js';
import { createSnowflakeAllocator, createKnexWorkerIdStore } from '../../src/snowflake/index.js';
import { bumpNextId } from '../../src/next-id/admin.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { runMainIsolated } from '../helpers/in-process.js';
import { closedPort, withUrl } from '../helpers/cli.js';

type Flavor = 'mysql' | 'postgres';
type Fault = 'closed port' | 'unknown host' | 'wrong password' | 'unknown database' | 'unmigrated';

/** The CLI commands that talk to a database (decode is offline: only its bad flags apply). */
const COMMANDS: Record<string, string[]> = {
  migrate: ['migrate'],
  next: ['next', 'order'],
  'tag add': ['tag', 'add', 'order'],
  'tag list': ['tag', 'list'],
  'tag set-step': ['tag', 'set-step', 'order', '5'],
  'tag bump': ['tag', 'bump', 'order', '--by', '10'],
  'tickets next': ['tickets', 'next'],
  'tickets status': ['tickets', 'status'],
  'tickets reshard': ['tickets', 'reshard'],
  'next-id bump': ['next-id', 'bump', '--ahead-ms', '1000'],
  'snowflake next': ['snowflake', 'next'],
  'workers list': ['workers', 'list'],
  serve: ['serve', '--port', '0'],
};

/** [code, exit] a command must give for a fault; undefined: the case does not apply (success is right). */
function expected(command: string, fault: Fault, flavor: Flavor): [IdleaseErrorCode, number] | undefined {
  // next_id() is PostgreSQL's: on a MySQL server that answers, the command refuses.
  if (command === 'next-id bump' && flavor === 'mysql' && fault === 'unmigrated') return ['BAD_CONFIG', 2];
  switch (fault) {
    case 'closed port':
      return ['DB_UNAVAILABLE', 1];
    case 'unknown host':
    case 'wrong password':
    case 'unknown database':
      return ['BAD_CONFIG', 2];
    case 'unmigrated':
      // tickets status reports an unmigrated server as "refused", exit 0
      // (every server down is DB_UNAVAILABLE, see below).
      if (command === 'tickets status') return undefined;
      return ['NOT_MIGRATED', 2];
  }
}

/**
 * Problems found in one table, listed together at the end (a concurrent test cannot use
 * expect.soft), each naming its case: the failure message is the list of wrong cells.
 */
class Problems {
  readonly list: string[] = [];
  check(ok: boolean, what: string, detail: string): void {
    if (!ok) this.list.push(`${what}: ${detail}`);
  }
  oneLine(res: { code: number; out: string; err: string }, code: IdleaseErrorCode, exit: number, what: string): void {
    this.check(new RegExp(`^idlease: ${code}: [^\\n]+\\n$`).test(res.err), what, `want one ${code} line, got ${JSON.stringify(res.err)}`);
    this.check(res.code === exit, what, `want exit ${exit}, got ${res.code}`);
    this.check(res.out === '', what, `want no stdout, got ${JSON.stringify(res.out.slice(0, 200))}`);
  }
}

describe('error matrix: every command × every fault', () => {
  let closed: number;
  let myEmpty: TestDb;
  let pgEmpty: TestDb;
  let migrated: TestDb;
  let busy: Server;
  let busyPort: number;
  const user = `idl_pw_${randomBytes(3).toString('hex')}`;
  const urls = {} as Record<Fault, Partial<Record<Flavor, string>>>;

  beforeAll(async () => {
    closed = await closedPort();
    [myEmpty, pgEmpty, migrated] = await Promise.all([
      createTestDb('mysql', 'matrix_empty'),
      createTestDb('postgres', 'matrix_empty'),
      createTestDb('mysql', 'matrix_ok'),
    ]);
    await migrate(migrated.knex, { workers: true });
    await myEmpty.knex.raw(`CREATE USER '${user}'@'%' IDENTIFIED BY 'right-password'`);
    await myEmpty.knex.raw(`GRANT ALL ON \`${new URL(myEmpty.url).pathname.slice(1)}\`.* TO '${user}'@'%'`);
    busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    busyPort = (busy.address() as { port: number }).port;
    const my = inject('mysqlUrl');
    const pg = inject('pgUrl');
    urls['closed port'] = { mysql: `mysql://root@127.0.0.1:${closed}/x`, postgres: `postgres://postgres@127.0.0.1:${closed}/x` };
    urls['unknown host'] = { mysql: 'mysql://root@nonexistent.invalid/x', postgres: 'postgres://postgres@nonexistent.invalid/x' };
    urls['wrong password'] = {
      mysql: withUrl(myEmpty.url, (u) => {
        u.username = user;
        u.password = 'wrong-password';
      }),
    };
    urls['unknown database'] = {
      mysql: withUrl(my, (u) => {
        u.pathname = '/idl_no_such_db';
      }),
      postgres: withUrl(pg, (u) => {
        u.pathname = '/idl_no_such_db';
      }),
    };
    // A password in the URL (PostgreSQL ignores it here: trust) shows that hints redact it.
    urls.unmigrated = {
      mysql: myEmpty.url,
      postgres: withUrl(pgEmpty.url, (u) => {
        u.password = 'pg-secret';
      }),
    };
  });
  afterAll(async () => {
    await myEmpty?.knex.raw(`DROP USER IF EXISTS '${user}'@'%'`).catch(() => undefined);
    busy?.close();
    await Promise.all([myEmpty?.drop(), pgEmpty?.drop(), migrated?.drop()]);
  });

  const faults: Fault[] = ['closed port', 'unknown host', 'wrong password', 'unknown database', 'unmigrated'];
  it.concurrent.each(faults)('CLI, every command: %s', async (fault) => {
    const runs = Object.entries(urls[fault]).flatMap(([flavor, url]) =>
      // migrate on the unmigrated database is the fix, not a fault: it would migrate the database
      // the other cases run against (it is covered by test/integration/cli-migrate.test.ts).
      Object.entries(COMMANDS)
        .filter(([name]) => !(fault === 'unmigrated' && name === 'migrate'))
        .map(async ([name, args]) => {
          const res = await runMainIsolated(['--url', url!, ...args]);
          return { name, flavor: flavor as Flavor, url: url!, res };
        }),
    );
    const p = new Problems();
    for (const { name, flavor, url, res } of await Promise.all(runs)) {
      const what = `${name} on ${flavor} (${fault})`;
      const want = expected(name, fault, flavor);
      if (want === undefined) {
        p.check(res.code === 0, what, `want exit 0, got ${res.code}: ${res.err}`);
        continue;
      }
      p.oneLine(res, want[0], want[1], what);
      p.check(!/wrong-password|pg-secret/.test(res.err), what, 'the password is in the message');
      p.check(
        !/waitTimeoutMs|timeoutMs|recovers by itself|migrate\(knex/.test(res.err),
        what,
        `library words in a CLI message: ${res.err}`,
      );
      // The commands that wait (--wait) say so; reshard and status do not wait for a server.
      if (fault === 'closed port' && !name.startsWith('tickets ')) p.check(res.err.includes('--wait'), what, `no --wait hint: ${res.err}`);
      if (want[0] === 'NOT_MIGRATED' && name !== 'tickets reshard') {
        // The hint is a command that runs against the same database, password redacted;
        // nothing about an older install, since none is there.
        const redacted = new URL(url);
        if (redacted.password) redacted.password = '***';
        const flag = `idlease --url ${redacted.password ? `'${redacted.toString()}'` : redacted.toString()} migrate`;
        p.check(res.err.includes(flag), what, `hint without the user's --url (${flag}): ${res.err}`);
        p.check(!/older idlease/.test(res.err), what, `older-install sentence with no older install: ${res.err}`);
      }
    }
    expect(p.list).toEqual([]);
  });

  it.concurrent('CLI: tickets status with every server down exits 1 (DB_UNAVAILABLE), one line', async () => {
    const res = await runMainIsolated([
      'tickets',
      'status',
      '--server',
      urls['closed port'].mysql!,
      '--server',
      urls['closed port'].postgres!,
    ]);
    const p = new Problems();
    p.oneLine(res, 'DB_UNAVAILABLE', 1, 'tickets status');
    expect(p.list).toEqual([]);
  });

  it.concurrent('CLI: serve on a busy port is BAD_CONFIG naming the port and --port, exit 2', async () => {
    const res = await runMainIsolated(['--url', migrated.url, 'serve', '--port', String(busyPort)]);
    const p = new Problems();
    p.oneLine(res, 'BAD_CONFIG', 2, 'serve');
    expect(p.list).toEqual([]);
    expect(res.err).toContain(`127.0.0.1:${busyPort} is already in use`);
    expect(res.err).toContain('--port');
  });

  it.concurrent.each([
    ...Object.values(COMMANDS).map((args) => [...args, '--bogus']),
    ['decode', '--bogus', '1'],
    ['decode', 'not-an-id'],
    ['--wait', 'soon', 'next', 'order'],
    ['next', 'order', '-n', '0'],
  ])('CLI bad flags are BAD_ARGUMENT, exit 2: %j', async (...args) => {
    const res = await runMainIsolated(['--url', urls['closed port'].mysql!, ...args]);
    const p = new Problems();
    p.oneLine(res, 'BAD_ARGUMENT', 2, args.join(' '));
    expect(p.list).toEqual([]);
  });

  it.concurrent('CLI: --schema and --table of the command are in the migrate hint', async () => {
    const res = await runMainIsolated(['--url', pgEmpty.url, 'next', 'order', '--schema', 'ids', '--table', 'seg']);
    expect(res.code, res.err).toBe(2);
    expect(res.err).toMatch(/^idlease: NOT_MIGRATED: [^\n]+\n$/);
    expect(res.err).toContain(`\`idlease --url ${pgEmpty.url} migrate --schema ids --segments-table seg\``);
  });

  it.concurrent(
    'CLI: a server that accepts and never answers ends in DB_UNAVAILABLE after the documented 5 s (next, snowflake next)',
    async () => {
      // The connection probe treats a silent server as slow (3 s), not refused; then the command's
      // own wait runs: 5 s by default, as the README says (snowflake next used to wait 10 s).
      const sockets = new Set<Socket>();
      const silent = createServer((sock) => {
        sockets.add(sock);
        sock.on('error', () => {});
      });
      await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
      const url = `mysql://root@127.0.0.1:${(silent.address() as { port: number }).port}/x`;
      try {
        const runs = await Promise.all(
          [
            ['next', 'order'],
            ['snowflake', 'next'],
          ].map((args) => runMainIsolated(['--url', url, ...args])),
        );
        const p = new Problems();
        for (const [i, res] of runs.entries()) {
          const what = i === 0 ? 'next' : 'snowflake next';
          p.oneLine(res, 'DB_UNAVAILABLE', 1, what);
          p.check(res.err.includes('within 5 s'), what, `want "within 5 s": ${res.err}`);
          p.check(res.err.includes('--wait'), what, `want the --wait hint: ${res.err}`);
          // 3 s probe + 5 s wait (+ closing); a 10 s wait could not finish inside 12 s.
          p.check(res.ms < 12_000, what, `took ${res.ms} ms`);
        }
        expect(p.list).toEqual([]);
      } finally {
        for (const sock of sockets) sock.destroy();
        silent.close();
      }
    },
  );

  it.concurrent('CLI: an unknown tag names the tag add command for the same database, in CLI words', async () => {
    const res = await runMainIsolated(['--url', migrated.url, 'next', 'nosuch']);
    expect(res.code, res.err).toBe(2);
    expect(res.err).toMatch(/^idlease: UNKNOWN_TAG: [^\n]+\n$/);
    expect(res.err).toContain(`\`idlease --url ${migrated.url} tag add nosuch\`, or pass --create`);
    expect(res.err).not.toMatch(/createSegmentAllocator|addTag\(/);
  });

  // An allocator that gets no answer within its wait ends in DB_UNAVAILABLE, whatever the fault: the
  // wait must hold a first call's connect, version query and statement with every entry × fault
  // running at once on a loaded machine (a fresh-clone CI on a slow day went past 1.5 s once: a
  // snowflake claim on an unmigrated PostgreSQL).
  const FIRST_CALL_WAIT_MS = 10_000;

  /** Library entry points: the first call of each, against each fault; always an IdleaseError. */
  const ENTRIES: Record<string, { oneShot: boolean; call: (knex: Knex) => Promise<unknown> }> = {
    'createSegmentAllocator().next()': {
      oneShot: false,
      call: async (knex) => {
        const a = createSegmentAllocator({ knex, tag: 'order', waitTimeoutMs: FIRST_CALL_WAIT_MS });
        try {
          return await a.next();
        } finally {
          await a.close();
        }
      },
    },
    'createTicketAllocator().next()': {
      oneShot: false,
      call: async (knex) => {
        const a = createTicketAllocator({ servers: [{ knex, offset: 1 }], increment: 1, timeoutMs: FIRST_CALL_WAIT_MS });
        try {
          return await a.next();
        } finally {
          await a.close();
        }
      },
    },
    'createSnowflakeAllocator().next()': {
      oneShot: false,
      call: async (knex) => {
        const a = createSnowflakeAllocator({ knex, group: 'matrix', waitTimeoutMs: FIRST_CALL_WAIT_MS });
        try {
          return await a.next();
        } finally {
          await a.close();
        }
      },
    },
    'migrate()': { oneShot: true, call: (knex) => migrate(knex) },
    'addTag()': { oneShot: true, call: (knex) => addTag(knex, { tag: 'order' }) },
    'listTags()': { oneShot: true, call: (knex) => listTags(knex) },
    'setStep()': { oneShot: true, call: (knex) => setStep(knex, 'order', 5) },
    'bumpTag()': { oneShot: true, call: (knex) => bumpTag(knex, { tag: 'order', by: 10 }) },
    'worker store list()': {
      oneShot: true,
      call: (knex) => createKnexWorkerIdStore(knex, { schema: undefined, table: 'idlease_workers' }).list(),
    },
    'bumpNextId()': { oneShot: true, call: (knex) => bumpNextId(knex, { aheadMs: 1000 }) },
  };

  it.concurrent.each(faults)('library entry points: %s', async (fault) => {
    const runs = Object.entries(urls[fault]).flatMap(([flavor, url]) =>
      Object.entries(ENTRIES)
        .filter(([name]) => !(fault === 'unmigrated' && name === 'migrate()'))
        .map(async ([name, entry]) => {
          const knex = connect(url!, { log: () => {} });
          try {
            await entry.call(knex);
            return { name, flavor: flavor as Flavor, entry, err: undefined as unknown };
          } catch (err) {
            return { name, flavor: flavor as Flavor, entry, err };
          } finally {
            await knex.destroy();
          }
        }),
    );
    const p = new Problems();
    for (const { name, flavor, entry, err } of await Promise.all(runs)) {
      const what = `${name} on ${flavor} (${fault})`;
      const got = `${(err as { code?: string })?.code ?? 'no code'}: ${String(err)}`;
      let want: IdleaseErrorCode;
      // next_id() is PostgreSQL's: a MySQL handle is refused before anything is sent.
      if (name === 'bumpNextId()' && flavor === 'mysql') want = 'BAD_CONFIG';
      else if (fault === 'unmigrated') want = 'NOT_MIGRATED';
      // One-shot calls name a setup problem at once; allocators keep retrying (credentials may be
      // rotated, a database restarts) and end in DB_UNAVAILABLE that names the cause.
      else want = fault === 'closed port' || !entry.oneShot ? 'DB_UNAVAILABLE' : 'BAD_CONFIG';
      p.check(isIdleaseError(err, want), what, `want ${want}, got ${got}`);
      p.check(!/older idlease/.test(String((err as Error)?.message)), what, `older-install sentence with no older install: ${got}`);
    }
    expect(p.list).toEqual([]);
  });
});
