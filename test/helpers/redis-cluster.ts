/**
 * A private Redis Cluster for the Redis sequence tests and bench: `masters` masters with
 * `replicas` replicas each, every node a redis-server on a free port with a directory of its own
 * (test/helpers/redis.ts), joined by `redis-cli --cluster create`. A node SIGKILLed and started
 * again comes back from its nodes.conf: as a replica of whoever took its slots.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { startRedis, type RedisServer } from './redis.js';

const run = promisify(execFile);

export interface RedisCluster {
  readonly nodes: readonly RedisServer[];
  /** `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,…` (the CLI's form). */
  readonly url: string;
  /** The node that serves `slot` now (a master), by CLUSTER SLOTS asked of a live node. */
  masterOf(slot: number): Promise<RedisServer>;
  /** The masters and, for each, its replicas, as a live node sees them. */
  roles(): Promise<Array<{ master: RedisServer; replicas: RedisServer[] }>>;
  keySlot(key: string): Promise<number>;
  /** What `redis-cli --cluster reshard` does for one slot: IMPORTING/MIGRATING, MIGRATE each key, SETSLOT NODE everywhere. */
  migrateSlot(slot: number, to: RedisServer): Promise<void>;
  /** Every live node says cluster_state:ok and agrees on who serves every slot. */
  untilOk(timeoutMs?: number): Promise<void>;
  destroy(): Promise<void>;
}

const NODE_TIMEOUT_MS = 1_000;

type NodeRef = [string, number, string];

/** `password`: every node requires it (and its replicas use it towards their masters). */
export async function startRedisCluster(masters = 3, replicas = 1, password?: string): Promise<RedisCluster> {
  const auth = password === undefined ? [] : ['--requirepass', password, '--masterauth', password];
  const nodes: RedisServer[] = [];
  try {
    for (let i = 0; i < masters * (1 + replicas); i++)
      nodes.push(
        await startRedis('none', [
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          'nodes.conf',
          '--cluster-node-timeout',
          String(NODE_TIMEOUT_MS),
          // A replica promotes at once when its master is gone: no wait for a "better" replica.
          '--cluster-replica-validity-factor',
          '0',
          ...auth,
        ]),
      );
    await run('redis-cli', [
      ...(password === undefined ? [] : ['-a', password, '--no-auth-warning']),
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ]);
  } catch (err) {
    await Promise.all(nodes.map((n) => n.destroy()));
    throw err;
  }
  const byPort = (port: number) => nodes.find((n) => n.port === port)!;
  const live = async <T>(f: (n: RedisServer) => Promise<T>): Promise<T> => {
    let last: unknown;
    for (const n of nodes) {
      try {
        return await f(n);
      } catch (err) {
        last = err;
      }
    }
    throw last;
  };
  const slots = () => live(async (n) => (await n.command('CLUSTER', 'SLOTS')) as Array<[number, number, NodeRef, ...NodeRef[]]>);
  const idOf = async (n: RedisServer) => String(await n.command('CLUSTER', 'MYID'));
  const cluster: RedisCluster = {
    nodes,
    url: `redis+cluster://${password === undefined ? '' : `:${encodeURIComponent(password)}@`}${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`,
    async masterOf(slot) {
      for (const [from, to, master] of await slots()) if (slot >= from && slot <= to) return byPort(master[1]);
      throw new Error(`no node serves slot ${slot}`);
    },
    async roles() {
      const seen = new Map<number, { master: RedisServer; replicas: RedisServer[] }>();
      for (const [, , master, ...reps] of await slots())
        if (!seen.has(master[1])) seen.set(master[1], { master: byPort(master[1]), replicas: reps.map((r) => byPort(r[1])) });
      return [...seen.values()];
    },
    async keySlot(key) {
      return Number(await live((n) => n.command('CLUSTER', 'KEYSLOT', key)));
    },
    async migrateSlot(slot, to) {
      const from = await cluster.masterOf(slot);
      const [fromId, toId] = [await idOf(from), await idOf(to)];
      await to.command('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
      await from.command('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
      for (;;) {
        const keys = (await from.command('CLUSTER', 'GETKEYSINSLOT', String(slot), '100')) as string[];
        if (keys.length === 0) break;
        await from.command('MIGRATE', '127.0.0.1', String(to.port), '', '0', '5000', 'KEYS', ...keys);
      }
      // The target first, then the source, then every other master (what redis-cli does).
      await to.command('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
      await from.command('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
      for (const { master } of await cluster.roles())
        if (master !== to && master !== from) await master.command('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId).catch(() => undefined);
    },
    async untilOk(timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const states = await Promise.all(
          nodes.map((n) =>
            n.command('CLUSTER', 'INFO').then(
              (s) => String(s),
              () => 'down',
            ),
          ),
        );
        const up = states.filter((s) => s !== 'down');
        if (up.length > 0 && up.every((s) => s.includes('cluster_state:ok'))) return;
        if (Date.now() > deadline) throw new Error(`cluster not ok within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async destroy() {
      await Promise.all(nodes.map((n) => n.destroy()));
    },
  };
  await cluster.untilOk();
  // Replicas attach after `create` returns: wait until each master lists its own.
  for (let i = 0; ; i++) {
    const roles = await cluster.roles();
    if (roles.length === masters && roles.every((r) => r.replicas.length === replicas)) break;
    if (i > 200) throw new Error('replicas did not attach within 20 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  return cluster;
}
