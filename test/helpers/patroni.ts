/**
 * A real Patroni cluster for HA tests (issue 31): a one-node etcd, three PostgreSQL nodes each
 * under its own Patroni, and HAProxy routing to whichever node answers Patroni's REST `/primary`
 * with 200 — the stack people run, from Debian's packages (`etcd-server`, `patroni`, `haproxy`;
 * scripts/ensure-databases.sh installs them). Everything lives in one temp directory on free
 * ports and is stopped by `stop()` (call it in afterEach/afterAll; if the test process exits
 * without it, an exit hook SIGKILLs every process it started).
 *
 * Settings, and why:
 *   - etcd 3.4 has its v2 API off, so Patroni gets an `etcd3:` section.
 *   - `ttl` 8 s, `loop_wait` 1 s, `retry_timeout` 3 s (Patroni requires ttl ≥ loop_wait +
 *     2 × retry_timeout): a crashed leader's key expires after ≤ 8 s and a replica takes over
 *     within a second of that. Patroni's defaults (30/10/10) would make each crash cost ~30 s.
 *   - HAProxy checks every 500 ms, marks a node down after 2 failures, up after 1, and cuts the
 *     open sessions of a node marked down (`on-marked-down shutdown-sessions`), so clients are
 *     moved to the new leader, not left on a demoted server.
 *   - Patroni runs as the postgres user when we are root (`setpriv`), as initdb requires.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { alive } from './partition.js';
import { freePort, postgresTempDir, waitForPort } from './servers.js';
import { sleep } from './wait.js';

const execFileP = promisify(execFile);
const INSTALL = 'Install them: bash scripts/ensure-databases.sh (Debian packages etcd-server, patroni, haproxy)';

export interface PatroniNode {
  readonly name: string;
  readonly pgPort: number;
  readonly restPort: number;
  readonly dataDir: string;
  /** The Patroni process, until crashed or stopped. */
  process: ChildProcess | undefined;
}

export interface PatroniCluster {
  readonly dir: string;
  readonly scope: string;
  readonly nodes: readonly PatroniNode[];
  /** The port clients use: HAProxy, routing to the leader. */
  readonly port: number;
  /** A postgres:// URL: through HAProxy by default, or to one node's PostgreSQL. */
  url(port?: number): string;
  /** The node whose REST API answers `/primary` with 200 (`exclude`d nodes are not asked). */
  waitForLeader(options?: { exclude?: readonly PatroniNode[]; timeoutMs?: number }): Promise<PatroniNode>;
  /** Resolves once every live replica streams from the leader (and, with synchronous_mode, one is synchronous). */
  waitForReplicas(count: number, timeoutMs?: number): Promise<void>;
  /** Resolves once HAProxy marks only `node` UP and a write through HAProxy lands on it (a transaction id assigned). */
  waitForWriteThroughProxy(node: PatroniNode, timeoutMs?: number): Promise<void>;
  /** A node crash: SIGKILL Patroni, the postmaster and every backend of the leader. Returns the crashed node. */
  crashLeader(): Promise<PatroniNode>;
  /** `patronictl switchover` from the leader to `candidate` (default: any replica). Returns the new leader. */
  switchover(candidate?: PatroniNode): Promise<PatroniNode>;
  /** `patronictl edit-config --set synchronous_mode=…`; waits for a synchronous standby when turning it on. */
  setSynchronousMode(on: boolean): Promise<void>;
  /**
   * SIGSTOP the leader's walsenders (as read from pg_stat_replication): the replicas stop
   * receiving WAL while the leader goes on committing (asynchronous) or waits (synchronous).
   * Returns a function that SIGCONTs them.
   */
  pauseWalSenders(): Promise<() => void>;
  /** Stop everything: Patroni (which stops PostgreSQL), any postmaster left, HAProxy, etcd. Idempotent. */
  stop(): Promise<void>;
}

function requireBinary(bin: string, candidates: readonly string[]): string {
  for (const c of candidates) if (existsSync(c)) return c;
  throw new Error(`${bin} not found (looked in ${candidates.join(', ')}). ${INSTALL}`);
}

function pgBinDir(): string {
  const dir = ['/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin'].find((d) =>
    existsSync(path.join(d, 'postgres')),
  );
  if (!dir)
    throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql. Install them: bash scripts/ensure-databases.sh');
  return dir;
}

/** Every live descendant of `pid` (from /proc), deepest last. */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      /* exited meanwhile */
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of children.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    /* gone */
  }
}

function postmasterPid(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
    return Number.isInteger(pid) && pid > 0 && alive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

function waitExit(child: ChildProcess | undefined, timeoutMs: number): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

async function restGet(node: PatroniNode, route: string): Promise<{ status: number; body: string }> {
  try {
    const res = await fetch(`http://127.0.0.1:${node.restPort}${route}`, { signal: AbortSignal.timeout(1_000) });
    return { status: res.status, body: await res.text() };
  } catch {
    return { status: 0, body: '' };
  }
}

async function query<T extends pg.QueryResultRow>(port: number, sql: string): Promise<T[]> {
  const client = new pg.Client({
    host: '127.0.0.1',
    port,
    user: 'postgres',
    database: 'postgres',
    connectionTimeoutMillis: 1_000,
    query_timeout: 2_000,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Start a cluster; a start that fails (its error ends with the tail of each node's Patroni log) is
 * tried once more in a new directory on new ports, after everything the first try started is stopped.
 */
export async function startPatroniCluster(options: { nodes?: number; synchronousMode?: boolean } = {}): Promise<PatroniCluster> {
  try {
    return await startPatroniClusterOnce(options);
  } catch (err) {
    process.stderr.write(`patroni: the cluster did not start: ${String((err as Error).message)}\npatroni: trying once more\n`);
    return await startPatroniClusterOnce(options);
  }
}

async function startPatroniClusterOnce(options: { nodes?: number; synchronousMode?: boolean }): Promise<PatroniCluster> {
  const etcdBin = requireBinary('etcd', ['/usr/bin/etcd']);
  const patroniBin = requireBinary('patroni', ['/usr/bin/patroni']);
  const patronictlBin = requireBinary('patronictl', ['/usr/bin/patronictl']);
  const haproxyBin = requireBinary('haproxy', ['/usr/sbin/haproxy', '/usr/bin/haproxy']);
  const binDir = pgBinDir();
  const asRoot = process.getuid?.() === 0;
  const dir = postgresTempDir('idlease-patroni-');
  const scope = `idlease-${path.basename(dir).slice(-6).toLowerCase()}`;
  const [etcdClient, etcdPeer, haproxyPort] = [await freePort(), await freePort(), await freePort()];
  const nodes: PatroniNode[] = [];
  for (let i = 0; i < (options.nodes ?? 3); i++) {
    nodes.push({
      name: `pg${i}`,
      pgPort: await freePort(),
      restPort: await freePort(),
      dataDir: path.join(dir, `pg${i}`),
      process: undefined,
    });
  }
  const others: ChildProcess[] = [];
  const log = (name: string) => openSync(path.join(dir, `${name}.log`), 'a');
  const spawnLogged = (name: string, command: string, args: readonly string[], asPostgres = false): ChildProcess => {
    const fd = log(name);
    const child =
      asPostgres && asRoot
        ? spawn('setpriv', ['--reuid=postgres', '--regid=postgres', '--init-groups', command, ...args], {
            stdio: ['ignore', fd, fd],
            cwd: dir,
          })
        : spawn(command, args, { stdio: ['ignore', fd, fd], cwd: dir });
    closeSync(fd);
    return child;
  };

  // If the test process dies without calling stop(), nothing it started outlives it.
  const killAllNow = () => {
    for (const n of nodes) {
      if (n.process?.pid) killQuietly(n.process.pid, 'SIGKILL');
      const pm = postmasterPid(n.dataDir);
      if (pm) for (const p of [pm, ...descendants(pm)]) killQuietly(p, 'SIGKILL');
    }
    for (const c of others) if (c.pid) killQuietly(c.pid, 'SIGKILL');
  };
  process.once('exit', killAllNow);

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    process.removeListener('exit', killAllNow);
    // Resume anything left paused, or fast shutdown waits for it forever.
    for (const n of nodes) {
      const pm = postmasterPid(n.dataDir);
      if (pm) for (const p of descendants(pm)) killQuietly(p, 'SIGCONT');
    }
    await Promise.all(
      nodes.map(async (n) => {
        n.process?.kill('SIGTERM');
        await waitExit(n.process, 20_000);
        n.process = undefined;
        const pm = postmasterPid(n.dataDir);
        if (pm) {
          for (const p of [pm, ...descendants(pm)]) killQuietly(p, 'SIGKILL');
          for (let i = 0; i < 50 && alive(pm); i++) await sleep(100);
        }
      }),
    );
    for (const c of others) c.kill('SIGTERM');
    await Promise.all(others.map((c) => waitExit(c, 10_000)));
    // IDLEASE_KEEP_HA_DIR=1 keeps the logs (etcd, each Patroni, HAProxy) and data for a post-mortem.
    if (!process.env.IDLEASE_KEEP_HA_DIR) rmSync(dir, { recursive: true, force: true });
  };

  try {
    others.push(
      spawnLogged('etcd', etcdBin, [
        '--name=etcd0',
        `--data-dir=${path.join(dir, 'etcd')}`,
        `--listen-client-urls=http://127.0.0.1:${etcdClient}`,
        `--advertise-client-urls=http://127.0.0.1:${etcdClient}`,
        `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
        `--initial-cluster=etcd0=http://127.0.0.1:${etcdPeer}`,
        '--initial-cluster-state=new',
      ]),
    );
    await waitForPort(etcdClient, 30_000);

    const configOf = (n: PatroniNode) => path.join(dir, `${n.name}.yml`);
    for (const n of nodes) {
      // JSON is YAML: no YAML writer needed.
      const config = {
        scope,
        namespace: '/idlease/',
        name: n.name,
        log: { level: 'INFO' },
        restapi: { listen: `127.0.0.1:${n.restPort}`, connect_address: `127.0.0.1:${n.restPort}` },
        etcd3: { hosts: [`127.0.0.1:${etcdClient}`] },
        bootstrap: {
          dcs: {
            ttl: 8,
            loop_wait: 1,
            retry_timeout: 3,
            maximum_lag_on_failover: 1_048_576,
            synchronous_mode: options.synchronousMode ?? false,
            postgresql: {
              use_pg_rewind: false,
              parameters: {
                wal_level: 'replica',
                hot_standby: 'on',
                max_wal_senders: 10,
                max_replication_slots: 10,
                wal_keep_size: '128MB',
              },
            },
          },
          initdb: [{ encoding: 'UTF8' }, 'no-sync'],
          pg_hba: ['local all all trust', 'host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust'],
        },
        postgresql: {
          listen: `127.0.0.1:${n.pgPort}`,
          connect_address: `127.0.0.1:${n.pgPort}`,
          data_dir: n.dataDir,
          bin_dir: binDir,
          pgpass: path.join(dir, `${n.name}.pgpass`),
          authentication: { superuser: { username: 'postgres' }, replication: { username: 'postgres' } },
          parameters: { unix_socket_directories: dir, fsync: 'on' },
          basebackup: ['no-sync'],
        },
        tags: { nofailover: false, noloadbalance: false, clonefrom: false, nosync: false },
      };
      writeFileSync(configOf(n), JSON.stringify(config, null, 2));
      if (asRoot) execFileSync('chown', ['postgres:postgres', configOf(n)]);
    }

    const startNode = (n: PatroniNode) => {
      n.process = spawnLogged(n.name, patroniBin, [configOf(n)], true);
    };
    // The first node bootstraps (initdb) alone; the others clone it once it leads.
    startNode(nodes[0]!);
    const ctl = async (args: readonly string[]) => {
      const { stdout } = await execFileP(patronictlBin, ['-c', configOf(nodes[0]!), ...args], { timeout: 60_000 });
      return stdout;
    };

    const waitForLeader: PatroniCluster['waitForLeader'] = async ({ exclude = [], timeoutMs = 60_000 } = {}) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        for (const n of nodes) {
          if (exclude.includes(n) || !n.process) continue;
          if ((await restGet(n, '/primary')).status === 200) return n;
        }
        if (Date.now() > deadline)
          throw new Error(`no Patroni leader within ${timeoutMs} ms; logs in ${dir}: ${tail(path.join(dir, 'pg0.log'))}`);
        await sleep(200);
      }
    };
    await waitForLeader({ timeoutMs: 90_000 });
    for (const n of nodes.slice(1)) startNode(n);

    const waitForReplicas: PatroniCluster['waitForReplicas'] = async (count, timeoutMs = 90_000) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const leader = await waitForLeader({ timeoutMs: Math.max(1_000, deadline - Date.now()) });
        const rows = await query<{ state: string; sync_state: string }>(
          leader.pgPort,
          'SELECT state, sync_state FROM pg_stat_replication',
        ).catch(() => []);
        const streaming = rows.filter((r) => r.state === 'streaming');
        const sync = (await ctl(['show-config']).catch(() => '')).includes('synchronous_mode: true');
        if (streaming.length >= count && (!sync || streaming.some((r) => r.sync_state === 'sync'))) return;
        if (Date.now() > deadline)
          throw new Error(
            `${count} streaming replicas not there within ${timeoutMs} ms: ${JSON.stringify(rows)}; ` +
              nodes
                .filter((n) => n !== leader)
                .map((n) => `\n--- ${n.name}.log (tail) ---\n${tail(path.join(dir, `${n.name}.log`), 1_500)}`)
                .join(''),
          );
        await sleep(300);
      }
    };
    await waitForReplicas(nodes.length - 1);

    const haproxyConfig = path.join(dir, 'haproxy.cfg');
    writeFileSync(
      haproxyConfig,
      [
        'global',
        '    maxconn 200',
        `    stats socket ${path.join(dir, 'haproxy.sock')} mode 600 level admin`,
        'defaults',
        '    mode tcp',
        '    retries 2',
        '    timeout connect 2s',
        '    timeout client 30m',
        '    timeout server 30m',
        '    timeout check 2s',
        'listen primary',
        `    bind 127.0.0.1:${haproxyPort}`,
        '    option httpchk GET /primary',
        '    http-check expect status 200',
        '    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions',
        ...nodes.map((n) => `    server ${n.name} 127.0.0.1:${n.pgPort} maxconn 100 check port ${n.restPort}`),
        '',
      ].join('\n'),
    );
    others.push(spawnLogged('haproxy', haproxyBin, ['-db', '-f', haproxyConfig]));
    await waitForPort(haproxyPort, 30_000);
    const proxyUp = async (): Promise<string[]> => {
      // `show stat` on the admin socket: CSV, svname in column 2, status in column 18.
      const csv = await new Promise<string>((resolve, reject) => {
        let out = '';
        const s = net.connect(path.join(dir, 'haproxy.sock'));
        s.setTimeout(2_000, () => s.destroy(new Error('HAProxy stats socket timed out')));
        s.on('connect', () => s.write('show stat\n'));
        s.on('data', (d) => (out += d.toString()));
        s.on('end', () => resolve(out));
        s.on('error', reject);
      });
      return (
        csv
          .split('\n')
          .map((line) => line.split(','))
          // 'UP 1/2' (failed one check, going down) still takes connections: routable too.
          .filter((f) => f[0] === 'primary' && f[1] !== 'FRONTEND' && f[1] !== 'BACKEND' && f[17]?.startsWith('UP'))
          .map((f) => f[1]!)
      );
    };
    const waitForWriteThroughProxy: PatroniCluster['waitForWriteThroughProxy'] = async (node, timeoutMs = 60_000) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        // Only `node` routable (HAProxy starts every server UP, and a server failing its checks stays
        // routable until `fall` of them failed), and a write through HAProxy landed on it.
        const up = await proxyUp().catch(() => []);
        if (up.length === 1 && up[0] === node.name) {
          const rows = await query<{ port: number }>(haproxyPort, 'SELECT inet_server_port() AS port, txid_current()').catch(() => []);
          if (rows[0] && Number(rows[0].port) === node.pgPort) return;
        }
        if (Date.now() > deadline)
          throw new Error(`HAProxy did not route a write to ${node.name} within ${timeoutMs} ms (UP: ${up.join(', ')})`);
        await sleep(100);
      }
    };
    await waitForWriteThroughProxy(await waitForLeader());

    const cluster: PatroniCluster = {
      dir,
      scope,
      nodes,
      port: haproxyPort,
      url: (port = haproxyPort) => `postgres://postgres@127.0.0.1:${port}/postgres`,
      waitForLeader,
      waitForReplicas,
      waitForWriteThroughProxy,
      async crashLeader() {
        const leader = await waitForLeader();
        const pm = postmasterPid(leader.dataDir);
        const patroniPid = leader.process?.pid;
        // Everything at once, as a power cut would: Patroni first so nothing restarts PostgreSQL.
        const victims = [...(patroniPid ? [patroniPid] : []), ...(pm ? [pm, ...descendants(pm)] : [])];
        for (const p of victims) killQuietly(p, 'SIGKILL');
        await waitExit(leader.process, 10_000);
        leader.process = undefined;
        for (let i = 0; i < 100 && victims.some(alive); i++) await sleep(50);
        return leader;
      },
      async switchover(candidate) {
        const leader = await waitForLeader();
        const to = candidate ?? nodes.find((n) => n !== leader && n.process)!;
        await ctl(['switchover', scope, '--leader', leader.name, '--candidate', to.name, '--force']);
        return waitForLeader({ exclude: [leader] });
      },
      async setSynchronousMode(on) {
        await ctl(['edit-config', scope, '--set', `synchronous_mode=${on}`, '--force']);
        if (!on) return;
        const deadline = Date.now() + 60_000;
        for (;;) {
          const leader = await waitForLeader();
          const rows = await query<{ sync_state: string }>(leader.pgPort, 'SELECT sync_state FROM pg_stat_replication').catch(() => []);
          if (rows.some((r) => r.sync_state === 'sync')) return;
          if (Date.now() > deadline) throw new Error(`no synchronous standby within 60 s: ${JSON.stringify(rows)}`);
          await sleep(300);
        }
      },
      async pauseWalSenders() {
        const leader = await waitForLeader();
        const rows = await query<{ pid: number }>(leader.pgPort, 'SELECT pid FROM pg_stat_replication');
        if (rows.length === 0) throw new Error(`${leader.name} has no walsender to pause`);
        const pids = rows.map((r) => Number(r.pid));
        for (const p of pids) process.kill(p, 'SIGSTOP');
        return () => {
          for (const p of pids) killQuietly(p, 'SIGCONT');
        };
      },
      stop,
    };
    return cluster;
  } catch (err) {
    await stop();
    throw err;
  }
}

function tail(file: string, chars = 3_000): string {
  try {
    return readFileSync(file, 'utf8').slice(-chars);
  } catch {
    return '(no log)';
  }
}
