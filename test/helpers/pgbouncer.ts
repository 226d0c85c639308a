/**
 * A private PgBouncer in front of a PostgreSQL server, on a free port, for tests of what a
 * transaction-pooling proxy does to session state: each transaction of one client may run on a
 * different server session. Started and stopped by the test (call `stop()` in afterAll).
 * Needs the `pgbouncer` binary (Debian package `pgbouncer`; scripts/ensure-databases.sh installs it).
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, rmSync, writeFileSync, chownSync } from 'node:fs';
import path from 'node:path';
import { freePort, postgresTempDir, waitForPort } from './servers.js';

export interface PgBouncerOptions {
  /** Port of the PostgreSQL server on 127.0.0.1 (trust auth). */
  readonly serverPort: number;
  /** session | transaction | statement. Default transaction. */
  readonly poolMode?: 'session' | 'transaction' | 'statement';
  /** Server connections per database/user pair: fewer than the clients makes them share. Default 4. */
  readonly poolSize?: number;
}

export interface PgBouncerInstance {
  /** The server URL with host and port replaced by PgBouncer's. */
  via(serverUrl: string): string;
  readonly port: number;
  stop(): Promise<void>;
}

export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncerInstance> {
  const bin = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((p) => existsSync(p));
  if (!bin) throw new Error('pgbouncer not found. Install it: bash scripts/ensure-databases.sh (Debian package pgbouncer)');
  const dir = postgresTempDir('idlease-pgbouncer-');
  const port = await freePort();
  const ini = path.join(dir, 'pgbouncer.ini');
  const users = path.join(dir, 'userlist.txt');
  writeFileSync(users, '"postgres" ""\n');
  writeFileSync(
    ini,
    [
      '[databases]',
      `* = host=127.0.0.1 port=${options.serverPort}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      `unix_socket_dir = ${dir}`,
      'auth_type = trust',
      `auth_file = ${users}`,
      `pool_mode = ${options.poolMode ?? 'transaction'}`,
      `default_pool_size = ${options.poolSize ?? 4}`,
      'max_client_conn = 200',
      // node-postgres sends no unusual startup parameters, but drivers differ: accept and ignore these.
      'ignore_startup_parameters = extra_float_digits,options,statement_timeout',
      `logfile = ${path.join(dir, 'pgbouncer.log')}`,
      `pidfile = ${path.join(dir, 'pgbouncer.pid')}`,
      '',
    ].join('\n'),
  );
  // PgBouncer refuses to run as root: run it as the postgres OS user then (who owns dir).
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    for (const f of [ini, users]) chownSync(f, uid, gid);
  }
  const child: ChildProcess = asRoot
    ? spawn('runuser', ['-u', 'postgres', '--', bin, ini], { stdio: 'ignore' })
    : spawn(bin, [ini], { stdio: 'ignore' });
  let exited = false;
  child.once('exit', () => (exited = true));
  try {
    await waitForPort(port, 15_000);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`pgbouncer did not start (see ${path.join(dir, 'pgbouncer.log')}): ${(err as Error).message}`, { cause: err });
  }
  return {
    port,
    via(serverUrl: string) {
      const u = new URL(serverUrl);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    async stop() {
      if (!exited) {
        const gone = new Promise((r) => child.once('exit', r));
        // runuser passes SIGTERM on to pgbouncer, which then stops at once (SIGINT would wait for clients).
        child.kill('SIGTERM');
        await Promise.race([gone, new Promise((r) => setTimeout(r, 5_000))]);
        if (!exited) child.kill('SIGKILL');
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
