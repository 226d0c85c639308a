/**
 * TLS to PostgreSQL, MariaDB and Redis, never silently off: private servers with certificates
 * made by openssl here (a TLS-only PostgreSQL: hostssl lines only; a MariaDB with
 * require_secure_transport; a redis-server on --tls-port). The URL's sslmode / ssl-mode is
 * read by the drivers' own parsers; every mode that requires TLS or a certificate check fails
 * typed (BAD_CONFIG) when it cannot have it — through connect(), the CLI and serve.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { connect } from '../../src/connect.js';
import { addTag } from '../../src/segment/admin.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createSegmentAllocator } from '../../src/segment/allocator.js';
import { IdleaseError } from '../../src/errors.js';
import { runCli } from '../helpers/cli.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { startServe } from '../helpers/serve-process.js';
import type { ServerInstance } from '../helpers/servers.js';
import { makeCerts, removeCerts, startTlsMariadb, startTlsPostgres, startTlsRedis, type Certs, type TlsRedis } from '../helpers/tls.js';

let certs: Certs;
let pg: ServerInstance;
let my: ServerInstance;
let redis: TlsRedis;

beforeAll(async () => {
  certs = makeCerts();
  [pg, my, redis] = await Promise.all([startTlsPostgres(certs), startTlsMariadb(certs), startTlsRedis(certs)]);
});

afterAll(async () => {
  await Promise.all([pg?.destroy(), my?.destroy(), redis?.destroy()]);
  if (certs) removeCerts(certs);
});

const pgUrl = (host: string, query: string) => `postgres://postgres@${host}:${pg.port}/postgres?${query}`;
const myUrl = (host: string, query: string) => `mysql://root@${host}:${my.port}/test?${query}`;

/** connect(url), then one admin call: what it answers or how it fails. */
async function tryUrl(url: string): Promise<{ ok: true; tls: string } | { ok: false; err: unknown }> {
  let knex: ReturnType<typeof connect> | undefined;
  try {
    knex = connect(url, { connectTimeoutMs: 5_000 });
    await migrate(knex);
    await addTag(knex, { tag: `t${Math.random().toString(36).slice(2, 8)}` });
    const flavor = url.startsWith('mysql') ? 'mysql' : 'postgres';
    const tls =
      flavor === 'postgres'
        ? String(
            ((await knex.raw('SELECT ssl::text AS ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()')) as { rows: { ssl: string }[] })
              .rows[0]!.ssl,
          )
        : String((((await knex.raw("SHOW SESSION STATUS LIKE 'Ssl_cipher'")) as unknown[][])[0] as { Value: string }[])[0]!.Value);
    return { ok: true, tls };
  } catch (err) {
    return { ok: false, err };
  } finally {
    await knex?.destroy();
  }
}

function expectTlsFailure(r: Awaited<ReturnType<typeof tryUrl>>): void {
  expect(r.ok).toBe(false);
  const err = (r as { err: unknown }).err;
  expect(err).toBeInstanceOf(IdleaseError);
  expect((err as IdleaseError).code).toBe('BAD_CONFIG');
  expect((err as IdleaseError).message).toMatch(/TLS/);
}

describe('PostgreSQL sslmode (TLS-only server)', () => {
  it('verify-full with the right CA connects encrypted, and IDs are drawn over it', async () => {
    const url = pgUrl('localhost', `sslmode=verify-full&sslrootcert=${certs.ca}`);
    const r = await tryUrl(url);
    expect(r).toEqual({ ok: true, tls: 'true' });
    const knex = connect(url);
    await addTag(knex, { tag: 'order' });
    const orders = createSegmentAllocator({ knex, tag: 'order' });
    expect(await orders.next()).toBe(1n);
    await orders.close();
    await knex.destroy();
  });

  it('verify-full fails typed with a wrong CA, and with a host name the certificate does not name', async () => {
    expectTlsFailure(await tryUrl(pgUrl('localhost', `sslmode=verify-full&sslrootcert=${certs.wrongCa}`)));
    expectTlsFailure(await tryUrl(pgUrl('127.0.0.1', `sslmode=verify-full&sslrootcert=${certs.ca}`)));
  });

  it('verify-ca checks the chain, not the host name; require encrypts without a check', async () => {
    expect(await tryUrl(pgUrl('127.0.0.1', `sslmode=verify-ca&sslrootcert=${certs.ca}`))).toEqual({ ok: true, tls: 'true' });
    expectTlsFailure(await tryUrl(pgUrl('127.0.0.1', `sslmode=verify-ca&sslrootcert=${certs.wrongCa}`)));
    expect(await tryUrl(pgUrl('127.0.0.1', 'sslmode=require'))).toEqual({ ok: true, tls: 'true' });
  });

  it('a client certificate (sslcert, sslkey) is presented', async () => {
    const knex = connect(
      pgUrl('localhost', `sslmode=verify-full&sslrootcert=${certs.ca}&sslcert=${certs.clientCert}&sslkey=${certs.clientKey}`),
    );
    const rows = ((await knex.raw('SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()')) as { rows: { client_dn: string }[] })
      .rows;
    expect(rows[0]!.client_dn).toBe('/CN=postgres');
    await knex.destroy();
  });

  it('no TLS asked of a TLS-only server, and sslmode=require against a plain server, both fail typed', async () => {
    expectTlsFailure(await tryUrl(pgUrl('localhost', 'sslmode=disable')));
    const plain = new URL(inject('pgUrl'));
    plain.searchParams.set('sslmode', 'require');
    expectTlsFailure(await tryUrl(plain.toString()));
  });
});

describe('MariaDB ssl-mode (require_secure_transport)', () => {
  it('VERIFY_IDENTITY with the right CA connects encrypted', async () => {
    const r = await tryUrl(myUrl('localhost', `ssl-mode=VERIFY_IDENTITY&ssl-ca=${certs.ca}`));
    expect(r.ok).toBe(true);
    expect((r as { tls: string }).tls).not.toBe('');
  });

  it('VERIFY_IDENTITY fails typed with a wrong CA, and with a host name the certificate does not name', async () => {
    expectTlsFailure(await tryUrl(myUrl('localhost', `ssl-mode=VERIFY_IDENTITY&ssl-ca=${certs.wrongCa}`)));
    expectTlsFailure(await tryUrl(myUrl('127.0.0.1', `ssl-mode=VERIFY_IDENTITY&ssl-ca=${certs.ca}`)));
  });

  it('VERIFY_CA checks the chain only; REQUIRED encrypts without a check; a client certificate is accepted', async () => {
    expect((await tryUrl(myUrl('127.0.0.1', `ssl-mode=VERIFY_CA&ssl-ca=${certs.ca}`))).ok).toBe(true);
    expectTlsFailure(await tryUrl(myUrl('127.0.0.1', `ssl-mode=VERIFY_CA&ssl-ca=${certs.wrongCa}`)));
    expect((await tryUrl(myUrl('127.0.0.1', 'ssl-mode=REQUIRED'))).ok).toBe(true);
    expect(
      (
        await tryUrl(
          myUrl('localhost', `ssl-mode=VERIFY_IDENTITY&ssl-ca=${certs.ca}&ssl-cert=${certs.clientCert}&ssl-key=${certs.clientKey}`),
        )
      ).ok,
    ).toBe(true);
  });

  it('a plain connection to it, and ssl-mode=REQUIRED against a plain server, both fail typed', async () => {
    // MariaDB answers a plain connection under require_secure_transport with "access denied" (1045).
    const r = await tryUrl(myUrl('127.0.0.1', 'ssl-mode=DISABLED'));
    expect(r.ok).toBe(false);
    expect((r as { err: IdleaseError }).err.code).toBe('BAD_CONFIG');
    expect((r as { err: IdleaseError }).err.message).toMatch(/requires TLS/);
    const plain = new URL(inject('mysqlUrl'));
    plain.searchParams.set('ssl-mode', 'REQUIRED');
    expectTlsFailure(await tryUrl(plain.toString()));
  });
});

/** The URL of a test database with `query` added. */
function plus(url: string, query: string): string {
  return `${url}${url.includes('?') ? '&' : '?'}${query}`;
}

describe('issue 38, item 4: the default and prefer mean what libpq and the mysql client mean', () => {
  let plainPg: TestDb;
  let plainMy: TestDb;
  beforeAll(async () => {
    [plainPg, plainMy] = await Promise.all([createTestDb('postgres', 'tlsprefer'), createTestDb('mysql', 'tlsprefer')]);
  });
  afterAll(async () => {
    await Promise.all([plainPg?.drop(), plainMy?.drop()]);
  });

  it('no mode, prefer and allow use TLS where the server has it (PostgreSQL)', async () => {
    expect(await tryUrl(`postgres://postgres@localhost:${pg.port}/postgres`)).toEqual({ ok: true, tls: 'true' });
    expect(await tryUrl(pgUrl('localhost', 'sslmode=prefer'))).toEqual({ ok: true, tls: 'true' });
    // allow: plain first; a hostssl-only server refuses it, so TLS.
    expect(await tryUrl(pgUrl('localhost', 'sslmode=allow'))).toEqual({ ok: true, tls: 'true' });
    // prefer with a root certificate checks the chain, as libpq does.
    expectTlsFailure(await tryUrl(pgUrl('localhost', `sslmode=prefer&sslrootcert=${certs.wrongCa}`)));
  });

  it('no mode and prefer fall back to plain text against a server without TLS (PostgreSQL)', async () => {
    expect(await tryUrl(plainPg.url)).toEqual({ ok: true, tls: 'false' });
    expect(await tryUrl(plus(plainPg.url, 'sslmode=prefer'))).toEqual({ ok: true, tls: 'false' });
    expect(await tryUrl(plus(plainPg.url, 'sslmode=allow'))).toEqual({ ok: true, tls: 'false' });
  });

  it('no ssl-mode and PREFERRED use TLS where the server has it, plain text where it has none (MariaDB)', async () => {
    const tls = await tryUrl(`mysql://root@127.0.0.1:${my.port}/test`);
    expect(tls.ok, JSON.stringify(tls)).toBe(true);
    expect((tls as { tls: string }).tls).not.toBe('');
    expect((await tryUrl(myUrl('127.0.0.1', 'ssl-mode=PREFERRED'))).ok).toBe(true);
    expect(await tryUrl(plainMy.url)).toEqual({ ok: true, tls: '' });
    expect(await tryUrl(plus(plainMy.url, 'ssl-mode=PREFERRED'))).toEqual({ ok: true, tls: '' });
  });

  it('a mode given twice is refused, whichever spelling (BAD_CONFIG)', () => {
    for (const url of [
      plus(plainPg.url, 'sslmode=require&sslmode=disable'),
      plus(plainMy.url, 'ssl-mode=REQUIRED&ssl-mode=DISABLED'),
      plus(plainMy.url, 'ssl-mode=REQUIRED&sslmode=DISABLED'),
    ]) {
      let thrown: unknown;
      try {
        connect(url);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, url).toBeInstanceOf(IdleaseError);
      expect((thrown as IdleaseError).code).toBe('BAD_CONFIG');
      expect((thrown as IdleaseError).message).toMatch(/TLS mode 2 times/);
    }
  });
});

describe('the CLI and serve', () => {
  it('CLI: verify-full works; a wrong CA is exit 2 naming TLS', async () => {
    const good = pgUrl('localhost', `sslmode=verify-full&sslrootcert=${certs.ca}`);
    expect((await runCli(['--url', good, 'migrate'])).code).toBe(0);
    const added = await runCli(['--url', good, 'tag', 'add', 'cli_tls']);
    expect(added.code, added.stderr).toBe(0);
    const next = await runCli(['--url', good, 'next', 'cli_tls']);
    expect(next.stdout.trim()).toBe('1');
    const bad = await runCli(['--url', myUrl('localhost', `ssl-mode=VERIFY_IDENTITY&ssl-ca=${certs.wrongCa}`), 'migrate']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/TLS/);
    const plain = new URL(inject('pgUrl'));
    plain.searchParams.set('sslmode', 'require');
    const refused = await runCli(['--url', plain.toString(), 'tag', 'list']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/TLS/);
  });

  it('serve: over verify-full it serves; with a wrong CA it exits 2 at start', async () => {
    const good = myUrl('localhost', `ssl-mode=VERIFY_IDENTITY&ssl-ca=${certs.ca}`);
    expect((await runCli(['--url', good, 'migrate'])).code).toBe(0);
    expect((await runCli(['--url', good, 'tag', 'add', 'serve_tls'])).code).toBe(0);
    const serve = await startServe(good);
    try {
      const res = await fetch(`${serve.url}/api/segment/get/serve_tls`);
      expect(res.status).toBe(200);
      expect(BigInt(await res.text())).toBeGreaterThan(0n);
    } finally {
      await serve.stop();
    }
    const bad = await startServe(pgUrl('127.0.0.1', `sslmode=verify-full&sslrootcert=${certs.ca}`)).then(
      async (s) => {
        await s.stop();
        return 'started';
      },
      (err: Error) => err.message,
    );
    expect(bad).toMatch(/exited 2[\s\S]*TLS/);
  });

  it('Redis: rediss:// with ?ca= works; a wrong CA fails typed (BAD_CONFIG, exit 2)', async () => {
    const ok = await runCli(['redis', 'status', 'x', '--redis-url', `rediss://localhost:${redis.port}?ca=${certs.ca}`]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/no key/);
    const bad = await runCli(['redis', 'status', 'x', '--redis-url', `rediss://localhost:${redis.port}?ca=${certs.wrongCa}`]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/TLS/);
    const host = await runCli(['redis', 'status', 'x', '--redis-url', `rediss://127.0.0.1:${redis.port}?ca=${certs.ca}`]);
    expect(host.code).toBe(2);
  });
});
