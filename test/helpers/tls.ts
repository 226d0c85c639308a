/**
 * Certificates and TLS servers for the TLS tests, made here with openssl: a CA, a server
 * certificate for `localhost` only (so 127.0.0.1 is the wrong host name), a client
 * certificate, and a second CA that signed nothing of ours (the wrong CA). Fails, never
 * skips, when openssl is missing.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort, postgresTempDir, startMariadb, startPostgres, waitForPort, type ServerInstance } from './servers.js';
import { requireRedisServer } from './redis.js';

export interface Certs {
  readonly dir: string;
  readonly ca: string;
  readonly wrongCa: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
}

function openssl(args: string[], cwd: string): void {
  try {
    execFileSync('openssl', args, { cwd, stdio: 'pipe' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      throw new Error(
        'openssl not found: the TLS tests make their certificates with it. Install it: apt-get install openssl (or bash scripts/ensure-databases.sh).',
        { cause: err },
      );
    throw err;
  }
}

export function makeCerts(): Certs {
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-tls-'));
  const days = ['-days', '2'];
  for (const ca of ['ca', 'wrong-ca'])
    openssl(
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        `${ca}.key`,
        '-out',
        `${ca}.pem`,
        '-subj',
        `/CN=idlease test ${ca}`,
        ...days,
      ],
      dir,
    );
  const sign = (name: string, cn: string, ext: string) => {
    openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`], dir);
    writeFileSync(path.join(dir, `${name}.ext`), ext);
    openssl(
      [
        'x509',
        '-req',
        '-in',
        `${name}.csr`,
        '-CA',
        'ca.pem',
        '-CAkey',
        'ca.key',
        '-CAcreateserial',
        '-out',
        `${name}.pem`,
        '-extfile',
        `${name}.ext`,
        ...days,
      ],
      dir,
    );
  };
  sign('server', 'localhost', 'subjectAltName=DNS:localhost\n');
  sign('client', 'postgres', 'extendedKeyUsage=clientAuth\n');
  for (const f of ['server.key', 'client.key']) chmodSync(path.join(dir, f), 0o600);
  chmodSync(dir, 0o755);
  return {
    dir,
    ca: path.join(dir, 'ca.pem'),
    wrongCa: path.join(dir, 'wrong-ca.pem'),
    serverCert: path.join(dir, 'server.pem'),
    serverKey: path.join(dir, 'server.key'),
    clientCert: path.join(dir, 'client.pem'),
    clientKey: path.join(dir, 'client.key'),
  };
}

/** A private PostgreSQL with ssl=on that accepts TLS connections only (hostssl), listening on localhost. */
export async function startTlsPostgres(certs: Certs): Promise<ServerInstance> {
  // The server reads its key as the postgres user, which must own it (mode 0600).
  const own = postgresTempDir('idlease-pgtls-');
  for (const f of [certs.serverCert, certs.serverKey, certs.ca]) copyFileSync(f, path.join(own, path.basename(f)));
  chmodSync(path.join(own, 'server.key'), 0o600);
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    for (const f of ['server.pem', 'server.key', 'ca.pem']) chownSync(path.join(own, f), uid, gid);
  }
  const pg = await startPostgres({
    hba: ['local all all trust', 'hostssl all all 127.0.0.1/32 trust', 'hostssl all all ::1/128 trust'],
    settings: {
      listen_addresses: 'localhost',
      ssl: 'on',
      ssl_cert_file: path.join(own, 'server.pem'),
      ssl_key_file: path.join(own, 'server.key'),
      ssl_ca_file: path.join(own, 'ca.pem'),
    },
  });
  return {
    ...pg,
    async destroy() {
      await pg.destroy();
      rmSync(own, { recursive: true, force: true });
    },
  };
}

/** A private MariaDB with TLS and require_secure_transport: a plain connection is refused. */
export async function startTlsMariadb(certs: Certs): Promise<ServerInstance> {
  const db = await startMariadb([`--ssl-ca=${certs.ca}`, `--ssl-cert=${certs.serverCert}`, `--ssl-key=${certs.serverKey}`]);
  // The test database is made over the socket-less plain TCP first; only then is TLS required.
  execFileSync('mariadb', ['-h127.0.0.1', `-P${db.port}`, '-uroot', '--skip-ssl', '-e', 'SET GLOBAL require_secure_transport = ON'], {
    stdio: 'pipe',
  });
  return db;
}

export interface TlsRedis {
  readonly port: number;
  destroy(): Promise<void>;
}

/** A private redis-server answering TLS only (--tls-port, --port 0), no client certificate asked for. */
export async function startTlsRedis(certs: Certs): Promise<TlsRedis> {
  const bin = requireRedisServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-redistls-'));
  const port = await freePort();
  const child: ChildProcess = spawn(
    bin,
    [
      '--port',
      '0',
      '--tls-port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--save',
      '',
      '--appendonly',
      'no',
      '--tls-cert-file',
      certs.serverCert,
      '--tls-key-file',
      certs.serverKey,
      '--tls-ca-cert-file',
      certs.ca,
      '--tls-auth-clients',
      'no',
    ],
    { stdio: 'ignore' },
  );
  await waitForPort(port);
  return {
    port,
    async destroy() {
      if (child.exitCode === null && child.signalCode === null) {
        const gone = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function removeCerts(certs: Certs): void {
  if (existsSync(certs.dir)) rmSync(certs.dir, { recursive: true, force: true });
}
