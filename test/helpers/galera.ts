/**
 * A private 3-node MariaDB Galera cluster (galera-4) for HA tests: each node on its own SQL,
 * group-communication (gcomm) and IST ports with its own data directory; node 1 bootstraps
 * the cluster, nodes 2 and 3 join it by state transfer (rsync SST). `kill(i)` SIGKILLs one
 * node, `start(i)` brings it back (it rejoins by IST). Stop everything with `destroy()`.
 *
 * Timeouts are shortened so a dead node is evicted in about 3 s instead of the production
 * ~5 s (evs.suspect_timeout PT5S): the tests stay short; docs/failover.md states the default.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from './servers.js';
import { sleep } from './wait.js';

export const GALERA_PROVIDER = '/usr/lib/galera/libgalera_smm.so';

export interface GaleraNode {
  readonly index: number;
  readonly port: number;
  readonly url: string;
  /** `mysql://…/<database>` on this node. */
  urlFor(database: string): string;
}

export interface GaleraCluster {
  readonly nodes: readonly GaleraNode[];
  readonly dir: string;
  /** Start node i (0-based) again after kill()/stop(): it rejoins the running cluster. `args`: extra options for this start. */
  start(i: number, args?: readonly string[]): Promise<void>;
  /** SIGKILL node i. */
  kill(i: number): Promise<void>;
  stop(i: number): Promise<void>;
  /** Run SQL on node i with the mariadb client (tab-separated output, no column names). */
  sql(i: number, statement: string): string;
  /** Wait until node i is Synced and sees `size` members. */
  waitSynced(i: number, size: number, timeoutMs?: number): Promise<void>;
  destroy(): Promise<void>;
}

export interface GaleraOptions {
  /** Extra mariadbd options for every node (e.g. '--wsrep-auto-increment-control=OFF'). */
  readonly args?: readonly string[];
}

function need(file: string, what: string): void {
  if (!existsSync(file)) throw new Error(`${what} not found at ${file}. Install it: bash scripts/ensure-databases.sh`);
}

function waitExit(child: ChildProcess | undefined, timeoutMs = 30_000): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
  });
}

/**
 * Start a three-node cluster; a start that fails (its error names the node's own log tail) is tried
 * once more on new ports: a free port can be taken by another test's server between freePort() and
 * the node's bind ("Address already in use"), more so with several failover files at once.
 */
export async function startGalera(options: GaleraOptions = {}): Promise<GaleraCluster> {
  try {
    return await startGaleraOnce(options);
  } catch (err) {
    process.stderr.write(
      `galera: the cluster did not start (${String((err as Error).message).split('\n')[0]}); trying once more on new ports\n`,
    );
    return await startGaleraOnce(options);
  }
}

async function startGaleraOnce(options: GaleraOptions): Promise<GaleraCluster> {
  need(GALERA_PROVIDER, 'galera-4 (libgalera_smm.so)');
  need('/usr/sbin/mariadbd', 'mariadbd');
  need('/usr/bin/wsrep_sst_rsync', 'wsrep_sst_rsync (mariadb-server)');
  need('/usr/bin/rsync', 'rsync (the SST method)');
  const root = mkdtempSync(path.join(tmpdir(), 'idlease-galera-'));
  const ports = await Promise.all(
    Array.from({ length: 3 }, async () => ({
      sql: await freePort(),
      gcomm: await freePort(),
      ist: await freePort(),
      sst: await freePort(),
    })),
  );
  const address = ports.map((p) => `127.0.0.1:${p.gcomm}`).join(',');
  const children: Array<ChildProcess | undefined> = [undefined, undefined, undefined];
  const dirs = ports.map((_, i) => path.join(root, `node${i + 1}`));
  // Each node's tmpdir of its own: a starting mariadbd deletes every `#sql*` file in its tmpdir,
  // which in the default /tmp are other servers' live temporary tables (servers.ts startMariadb).
  const tmps = ports.map((_, i) => path.join(root, `tmp${i + 1}`));
  // As root, the joiner's rsync daemon would write as `nobody`: run the nodes as mysql instead.
  const user = process.getuid?.() === 0 ? 'mysql' : undefined;
  if (user) chmodSync(root, 0o755);

  const sql = (i: number, statement: string): string =>
    execFileSync('mariadb', ['-h127.0.0.1', `-P${ports[i]!.sql}`, '-uroot', '-N', '-B', '-e', statement], {
      timeout: 20_000,
      stdio: ['ignore', 'pipe', 'pipe'],
    }).toString();

  function launch(i: number, bootstrap: boolean, extra: readonly string[] = []): void {
    const p = ports[i]!;
    const dir = dirs[i]!;
    const provider = [
      `gmcast.listen_addr=tcp://127.0.0.1:${p.gcomm}`,
      `ist.recv_addr=127.0.0.1:${p.ist}`,
      'gcache.size=64M',
      // Test-only: evict a dead node in ~3 s (defaults: suspect PT5S, inactive PT15S). Shorter
      // (1.5 s) made the live nodes suspect each other on this loaded 2-core box while a node
      // rejoined, and the cluster went non-primary (1047 on every node).
      'evs.suspect_timeout=PT3S',
      'evs.inactive_timeout=PT6S',
      'evs.inactive_check_period=PT1S',
      'evs.keepalive_period=PT1S',
      'pc.wait_prim_timeout=PT10S',
    ].join(';');
    const args = [
      '--no-defaults',
      `--datadir=${dir}`,
      `--tmpdir=${tmps[i]!}`,
      `--port=${p.sql}`,
      `--socket=${path.join(dir, 'mysqld.sock')}`,
      `--user=${user ?? 'root'}`,
      '--bind-address=127.0.0.1',
      `--pid-file=${path.join(dir, 'mysqld.pid')}`,
      `--log-error=${path.join(dir, 'error.log')}`,
      '--skip-name-resolve',
      '--innodb-buffer-pool-size=16M',
      '--innodb-log-file-size=16M',
      '--innodb-flush-log-at-trx-commit=2',
      '--binlog-format=ROW',
      '--default-storage-engine=InnoDB',
      '--innodb-autoinc-lock-mode=2',
      '--performance-schema=OFF',
      '--skip-log-bin',
      '--wsrep-on=ON',
      `--wsrep-provider=${GALERA_PROVIDER}`,
      `--wsrep-cluster-address=gcomm://${bootstrap ? '' : address}`,
      '--wsrep-cluster-name=idlease',
      `--wsrep-node-name=node${i + 1}`,
      `--wsrep-node-address=127.0.0.1:${p.gcomm}`,
      `--wsrep-node-incoming-address=127.0.0.1:${p.sql}`,
      `--wsrep-sst-receive-address=127.0.0.1:${p.sst}`,
      '--wsrep-sst-method=rsync',
      `--wsrep-provider-options=${provider}`,
      '--wsrep-slave-threads=2',
      ...(options.args ?? []),
      ...extra,
    ];
    if (extra.includes('--wsrep-recover')) {
      execFileSync('/usr/sbin/mariadbd', args, { stdio: 'ignore', timeout: 60_000 });
      return;
    }
    children[i] = spawn('/usr/sbin/mariadbd', args, {
      stdio: 'ignore',
      env: { ...process.env, PATH: `/usr/bin:/usr/sbin:/bin:/sbin:${process.env.PATH ?? ''}` },
    });
  }

  async function waitSynced(i: number, size: number, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    while (Date.now() < deadline) {
      const child = children[i];
      if (child && (child.exitCode !== null || child.signalCode !== null)) break;
      try {
        last = sql(i, "SHOW STATUS WHERE Variable_name IN ('wsrep_cluster_size','wsrep_local_state_comment','wsrep_ready')");
        const m = Object.fromEntries(
          last
            .trim()
            .split('\n')
            .map((l) => l.split('\t') as [string, string]),
        );
        if (Number(m.wsrep_cluster_size) === size && m.wsrep_local_state_comment === 'Synced' && m.wsrep_ready === 'ON') return;
      } catch {
        /* not accepting connections yet */
      }
      await sleep(200);
    }
    const log = path.join(dirs[i]!, 'error.log');
    const tail = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-25).join('\n') : '(no error log)';
    throw new Error(
      `Galera node ${i + 1} not Synced with ${size} members within ${timeoutMs} ms (last status: ${JSON.stringify(last)}). Error log tail:\n${tail}`,
    );
  }

  const live = () => children.filter((c) => c && c.exitCode === null && c.signalCode === null).length;

  const cluster: GaleraCluster = {
    dir: root,
    nodes: ports.map((p, i) => ({
      index: i,
      port: p.sql,
      url: `mysql://root@127.0.0.1:${p.sql}/test`,
      urlFor: (db: string) => `mysql://root@127.0.0.1:${p.sql}/${db}`,
    })),
    async start(i, args = []) {
      // After a crash grastate.dat says seqno -1, which would cost a full state transfer (and
      // block the donor). Recover the position from InnoDB first, as the systemd unit's
      // galera_recovery does, so the node rejoins by IST from the others' gcache.
      const log = path.join(dirs[i]!, 'error.log');
      const before = existsSync(log) ? readFileSync(log, 'utf8').length : 0;
      launch(i, false, ['--wsrep-recover']);
      const recovered = /WSREP: Recovered position:\s*(\S+)/.exec(readFileSync(log, 'utf8').slice(before))?.[1];
      launch(i, false, [...args, ...(recovered ? [`--wsrep-start-position=${recovered}`] : [])]);
      await waitSynced(i, live());
    },
    async kill(i) {
      children[i]?.kill('SIGKILL');
      await waitExit(children[i]);
    },
    async stop(i) {
      children[i]?.kill('SIGTERM');
      await waitExit(children[i]);
    },
    sql,
    waitSynced,
    async destroy() {
      // Joiners first, so the last one standing shuts down as a clean primary.
      for (const i of [2, 1, 0]) {
        children[i]?.kill('SIGTERM');
        await waitExit(children[i], 15_000);
      }
      // IDLEASE_KEEP_GALERA=1 keeps the data dirs and error logs for a post-mortem.
      if (!process.env.IDLEASE_KEEP_GALERA) rmSync(root, { recursive: true, force: true });
    },
  };

  try {
    for (const [i, dir] of dirs.entries()) {
      for (const d of [dir, tmps[i]!]) {
        mkdirSync(d);
        if (user) execFileSync('chown', [user, d]);
      }
      execFileSync(
        '/usr/bin/mariadb-install-db',
        [
          '--no-defaults',
          `--datadir=${dir}`,
          `--tmpdir=${tmps[i]!}`,
          `--user=${user ?? 'root'}`,
          '--auth-root-authentication-method=normal',
          '--skip-test-db',
        ],
        { stdio: 'ignore' },
      );
    }
    launch(0, true);
    await waitSynced(0, 1);
    sql(0, 'CREATE DATABASE IF NOT EXISTS test');
    // Joiners one at a time: two concurrent SSTs from one donor slow both down.
    for (const i of [1, 2]) {
      launch(i, false);
      await waitSynced(i, i + 1);
    }
    await waitSynced(0, 3);
  } catch (err) {
    await cluster.destroy();
    throw err;
  }
  return cluster;
}
