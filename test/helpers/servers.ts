/**
 * Extra database servers for tests that must stop, kill or multiply a server
 * (ticket failover, DB-down recovery). Each lives in its own temp data directory on
 * its own port and is stopped by the test that started it (call `destroy()` in afterAll).
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync, chownSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import net from 'node:net';
import path from 'node:path';

export interface ServerInstance {
  readonly url: string;
  readonly port: number;
  /** Start (or restart) the server and wait until it accepts connections. */
  start(): Promise<void>;
  /** Clean shutdown. */
  stop(): Promise<void>;
  /** SIGKILL the server process. */
  kill(): Promise<void>;
  /** Stop and remove the data directory. */
  destroy(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

export async function waitForPort(port: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`server on port ${port} did not accept connections within ${timeoutMs} ms`);
}

function which(bin: string, candidates: string[]): string {
  for (const c of candidates) if (existsSync(c)) return c;
  throw new Error(`${bin} not found (looked in ${candidates.join(', ')}). Install it: bash scripts/ensure-databases.sh`);
}

function waitExit(child: ChildProcess | undefined, timeoutMs = 20_000): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

/** A private MariaDB server (mariadbd) with an empty root password. Extra my.cnf options via `args`. */
export async function startMariadb(args: string[] = []): Promise<ServerInstance> {
  const mariadbd = which('mariadbd', ['/usr/sbin/mariadbd', '/usr/sbin/mysqld']);
  const installDb = which('mariadb-install-db', ['/usr/bin/mariadb-install-db', '/usr/bin/mysql_install_db']);
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-mariadb-'));
  const port = await freePort();
  execFileSync(
    installDb,
    ['--no-defaults', `--datadir=${dir}`, '--user=root', '--auth-root-authentication-method=normal', '--skip-test-db'],
    { stdio: 'ignore' },
  );
  let child: ChildProcess | undefined;
  const inst: ServerInstance = {
    url: `mysql://root@127.0.0.1:${port}/test`,
    port,
    async start() {
      child = spawn(
        mariadbd,
        [
          '--no-defaults',
          `--datadir=${dir}`,
          `--port=${port}`,
          `--socket=${path.join(dir, 'mysqld.sock')}`,
          '--user=root',
          '--bind-address=127.0.0.1',
          `--pid-file=${path.join(dir, 'mysqld.pid')}`,
          `--log-error=${path.join(dir, 'error.log')}`,
          '--skip-name-resolve',
          ...args,
        ],
        { stdio: 'ignore' },
      );
      await waitForPort(port);
      execFileSync('mariadb', ['-h127.0.0.1', `-P${port}`, '-uroot', '-e', 'CREATE DATABASE IF NOT EXISTS test'], { stdio: 'ignore' });
    },
    async stop() {
      child?.kill('SIGTERM');
      await waitExit(child);
    },
    async kill() {
      child?.kill('SIGKILL');
      await waitExit(child);
    },
    async destroy() {
      await inst.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await inst.start();
  return inst;
}

/** A new temp directory the server can write: owned by the postgres OS user when we are root (the server runs as it then). */
export function postgresTempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  if (process.getuid?.() === 0)
    chownSync(
      dir,
      Number(execFileSync('id', ['-u', 'postgres']).toString().trim()),
      Number(execFileSync('id', ['-g', 'postgres']).toString().trim()),
    );
  return dir;
}

export interface PostgresOptions {
  /** A command the server runs under (e.g. valgrind and its flags); it gets the postgres binary and its arguments. */
  readonly wrapper?: readonly string[];
  /** Extra `-c name=value` settings. */
  readonly settings?: Readonly<Record<string, string>>;
  /** How long start() waits for the port (a server under valgrind starts slowly). */
  readonly startTimeoutMs?: number;
  /** Make this a streaming-replication standby of the server on this port (pg_basebackup -R) instead of a new cluster. */
  readonly standbyOf?: number;
  /**
   * Networks (CIDR) whose clients are trusted too: initdb's pg_hba.conf trusts loopback only,
   * and partition tests connect from network namespaces (test/helpers/partition.ts). Listen on
   * such an address with `settings: { listen_addresses: … }`.
   */
  readonly trustNetworks?: readonly string[];
  /** Replace initdb's pg_hba.conf with these lines (e.g. `hostssl all all 127.0.0.1/32 trust` only, for a TLS-only server). */
  readonly hba?: readonly string[];
}

export interface PostgresInstance extends ServerInstance {
  /** Promote a standby to primary and wait until it accepts writes. */
  promote(): Promise<void>;
}

/** A private PostgreSQL cluster (trust auth), run as the postgres OS user when we are root. */
export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresInstance> {
  const binDir = ['/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin'].find((d) =>
    existsSync(path.join(d, 'postgres')),
  );
  if (!binDir)
    throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql. Install them: bash scripts/ensure-databases.sh');
  const dir = postgresTempDir('idlease-pg-');
  const port = await freePort();
  const asPostgres = process.getuid?.() === 0;
  const run = (bin: string, args: string[]) =>
    asPostgres
      ? execFileSync('runuser', ['-u', 'postgres', '--', path.join(binDir, bin), ...args], { stdio: 'ignore' })
      : execFileSync(path.join(binDir, bin), args, { stdio: 'ignore' });
  if (options.standbyOf === undefined) run('initdb', ['-D', dir, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  else
    run('pg_basebackup', [
      '-h',
      '127.0.0.1',
      '-p',
      String(options.standbyOf),
      '-U',
      'postgres',
      '-D',
      dir,
      '-R',
      '-X',
      'stream',
      '--no-sync',
    ]);
  if (options.hba) writeFileSync(path.join(dir, 'pg_hba.conf'), options.hba.join('\n') + '\n');
  for (const cidr of options.trustNetworks ?? []) appendFileSync(path.join(dir, 'pg_hba.conf'), `host all all ${cidr} trust\n`);
  let child: ChildProcess | undefined;
  const inst: PostgresInstance = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    async start() {
      const settings = Object.entries({ listen_addresses: '127.0.0.1', fsync: 'off', ...options.settings }).flatMap(([k, v]) => [
        '-c',
        `${k}=${v}`,
      ]);
      const command = [...(options.wrapper ?? []), path.join(binDir, 'postgres'), '-D', dir, '-p', String(port), '-k', dir, ...settings];
      child = asPostgres
        ? spawn('runuser', ['-u', 'postgres', '--', ...command], { stdio: 'ignore' })
        : spawn(command[0]!, command.slice(1), { stdio: 'ignore' });
      await waitForPort(port, options.startTimeoutMs);
      await new Promise((r) => setTimeout(r, 300)); // the port opens a moment before startup completes
    },
    async stop() {
      try {
        run('pg_ctl', ['-D', dir, '-m', 'fast', '-w', 'stop']);
      } catch {
        /* already stopped */
      }
      await waitExit(child);
    },
    async kill() {
      try {
        run('pg_ctl', ['-D', dir, '-m', 'immediate', '-w', 'stop']);
      } catch {
        /* already stopped */
      }
      await waitExit(child);
    },
    async destroy() {
      await inst.stop();
      rmSync(dir, { recursive: true, force: true });
    },
    async promote() {
      run('pg_ctl', ['-D', dir, '-w', 'promote']);
    },
  };
  await inst.start();
  return inst;
}
