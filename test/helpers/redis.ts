/**
 * Private redis-server processes for the Redis sequence tests: each on a free port with a data
 * directory of its own, never the shared server on 6379. `kill()` is SIGKILL (what a crash or an
 * OOM kill does: no save on the way out); `start()` again restarts from whatever the directory holds.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createClient } from 'redis';
import { Redis } from 'ioredis';
import { freePort, waitForPort } from './servers.js';

export type Persistence = 'none' | 'rdb' | 'aof-everysec' | 'aof-always';

export interface RedisServer {
  readonly port: number;
  readonly dir: string;
  start(): Promise<void>;
  /** SIGKILL: nothing is saved on the way out. */
  kill(): Promise<void>;
  /** The redis-server process (SIGSTOP freezes it). */
  pid(): number | undefined;
  /** One command on a short-lived connection (CONFIG, SAVE, REPLICAOF, INFO …). */
  command(...args: string[]): Promise<unknown>;
  destroy(): Promise<void>;
}

export const REDIS_SERVER = '/usr/bin/redis-server';

/** Fails (never skips) when redis-server is missing, saying how to get it. */
export function requireRedisServer(): string {
  for (const c of [REDIS_SERVER, '/usr/local/bin/redis-server']) if (existsSync(c)) return c;
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server']).toString().trim();
  } catch {
    throw new Error(
      'redis-server not found: the Redis sequence tests start their own servers. Install it: `apt-get install redis-server` (or bash scripts/ensure-databases.sh).',
    );
  }
}

const PERSISTENCE_ARGS: Record<Persistence, string[]> = {
  none: ['--save', '', '--appendonly', 'no'],
  rdb: ['--save', '', '--appendonly', 'no', '--dbfilename', 'dump.rdb'],
  'aof-everysec': ['--save', '', '--appendonly', 'yes', '--appendfsync', 'everysec'],
  'aof-always': ['--save', '', '--appendonly', 'yes', '--appendfsync', 'always'],
};

export async function startRedis(
  persistence: Persistence = 'none',
  extra: string[] = [],
  env: Record<string, string> = {},
): Promise<RedisServer> {
  // A cluster node's bus port is claimed like its client port (Redis's default, port + 10000, may
  // be another server's or in the ephemeral range), once: a node restarted keeps it.
  const bus = extra.includes('--cluster-enabled') && !extra.includes('--cluster-port') ? ['--cluster-port', String(await freePort())] : [];
  return spawnRedis(
    (port, dir) => [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--daemonize',
      'no',
      '--loglevel',
      'warning',
      ...PERSISTENCE_ARGS[persistence],
      ...extra,
      ...bus,
    ],
    env,
  );
}

/**
 * A sentinel watching the primary on `masterPort` as master `name` (quorum 2), quick to act:
 * down after 500 ms. Sentinel rewrites its config file, so it gets one of its own.
 */
export async function startSentinel(masterPort: number, name = 'idl'): Promise<RedisServer> {
  return spawnRedis((port, dir) => {
    const conf = path.join(dir, 'sentinel.conf');
    writeFileSync(
      conf,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        'loglevel warning',
        `sentinel monitor ${name} 127.0.0.1 ${masterPort} 2`,
        `sentinel down-after-milliseconds ${name} 500`,
        `sentinel failover-timeout ${name} 5000`,
      ].join('\n') + '\n',
    );
    return [conf, '--sentinel'];
  });
}

async function spawnRedis(argsFor: (port: number, dir: string) => string[], env: Record<string, string> = {}): Promise<RedisServer> {
  const bin = requireRedisServer();
  const dir = mkdtempSync(path.join(tmpdir(), 'idlease-redis-'));
  const port = await freePort();
  let child: ChildProcess | undefined;
  const exited = () => !child || child.exitCode !== null || child.signalCode !== null;
  const server: RedisServer = {
    port,
    dir,
    async start() {
      child = spawn(bin, argsFor(port, dir), { stdio: 'ignore', env: { ...process.env, ...env } });
      await waitForPort(port);
      // A server loading a file answers LOADING until it is done: wait for a real answer.
      for (let i = 0; i < 200; i++) {
        try {
          await server.command('PING');
          return;
        } catch {
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    },
    pid: () => child?.pid,
    async kill() {
      if (exited()) return;
      const gone = new Promise((r) => child!.once('exit', r));
      child!.kill('SIGKILL');
      await gone;
    },
    async command(...args: string[]) {
      // A server started with --requirepass is asked with that password.
      const given = argsFor(port, dir);
      const at = given.indexOf('--requirepass');
      const password = at >= 0 ? given[at + 1] : undefined;
      const c = createClient({ socket: { port, host: '127.0.0.1', reconnectStrategy: false }, ...(password ? { password } : {}) });
      c.on('error', () => undefined);
      await c.connect();
      try {
        return await c.sendCommand(args);
      } finally {
        c.destroy();
      }
    },
    async destroy() {
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await server.start();
  return server;
}

/** A connected node-redis client that reconnects every 20 ms; destroyed by `cleanup`. */
export async function nodeRedisOn(port: number, cleanup: Array<() => unknown>) {
  const c = createClient({ socket: { port, host: '127.0.0.1', reconnectStrategy: () => 20 } });
  c.on('error', () => undefined);
  await c.connect();
  cleanup.push(() => c.destroy());
  return c;
}

/** An ioredis client that reconnects every 20 ms and keeps commands queued while down; disconnected by `cleanup`. */
export function ioRedisOn(port: number, cleanup: Array<() => unknown>) {
  const c = new Redis({ port, host: '127.0.0.1', retryStrategy: () => 20, maxRetriesPerRequest: null });
  c.on('error', () => undefined);
  cleanup.push(() => c.disconnect());
  return c;
}
