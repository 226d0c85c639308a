/**
 * A Redis Cluster that requires a password (as production clusters do): the CLI takes it in the
 * redis+cluster:// URL and hands it to every node the cluster names, a wrong one is BAD_CONFIG
 * without echoing it, and the library draws through both cluster clients given the password.
 * Three masters, no replicas: this is about authentication, not failover (redis-cluster.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCluster } from 'redis';
import { Cluster } from 'ioredis';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { runMain } from '../helpers/in-process.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import { createRedisSequence } from '../../src/redis-sequence/index.js';

const PASSWORD = 'cluster-s3cret-pw';

describe('a password-protected Redis Cluster', () => {
  let cluster: RedisCluster;
  let db: TestDb;
  beforeAll(async () => {
    cluster = await startRedisCluster(3, 0, PASSWORD);
    await cluster.untilOk();
    db = await createTestDb('postgres', 'rauth');
    await migrate(db.knex);
    await addTag(db.knex, { tag: 'order', step: 100 });
    await addTag(db.knex, { tag: 'invoice', step: 100 });
  }, 120_000);
  afterAll(async () => {
    await cluster?.destroy();
    await db?.drop();
  });

  it('the CLI draws with the password in the URL; a wrong password is BAD_CONFIG and is not echoed', async () => {
    expect(cluster.url).toContain(`:${PASSWORD}@`);
    const ok = await runMain(['--url', db.url, 'redis', 'next', 'order', '-n', '3', '--redis-url', cluster.url]);
    expect(ok.code, ok.err).toBe(0);
    const ids = ok.out.trim().split('\n').map(BigInt);
    expect(ids).toHaveLength(3);
    expect(ids[0]! < ids[1]! && ids[1]! < ids[2]!).toBe(true);
    const wrong = cluster.url.replace(PASSWORD, 'not-the-password');
    const bad = await runMain(['--url', db.url, '--wait', '5', 'redis', 'next', 'order', '--redis-url', wrong]);
    expect(bad.code, bad.err).toBe(2);
    expect(bad.err).toMatch(/^idlease: BAD_CONFIG: /);
    expect(bad.err).not.toContain('not-the-password');
    const none = await runMain([
      '--url',
      db.url,
      '--wait',
      '5',
      'redis',
      'next',
      'order',
      '--redis-url',
      cluster.url.replace(`:${PASSWORD}@`, ''),
    ]);
    expect(none.code, none.err).toBe(2);
    expect(none.err).toMatch(/^idlease: BAD_CONFIG: /);
  }, 60_000);

  it('node-redis createCluster and ioredis Cluster, given the password, draw one tag without a repeat', async () => {
    const ports = cluster.nodes.map((n) => n.port);
    const nodeRedis = createCluster({
      rootNodes: ports.map((port) => ({ socket: { host: '127.0.0.1', port } })),
      defaults: { password: PASSWORD },
    });
    nodeRedis.on('error', () => undefined);
    await nodeRedis.connect();
    const io = new Cluster(
      ports.map((port) => ({ host: '127.0.0.1', port })),
      { redisOptions: { password: PASSWORD } },
    );
    io.on('error', () => undefined);
    try {
      const a = createRedisSequence({ redis: nodeRedis, knex: db.knex, tag: 'invoice' });
      const b = createRedisSequence({ redis: io, knex: db.knex, tag: 'invoice' });
      const seen = new Set<bigint>();
      for (let i = 0; i < 300; i++) {
        for (const id of [await a.next(), await b.next()]) {
          expect(seen.has(id)).toBe(false);
          seen.add(id);
        }
      }
      expect(seen.size).toBe(600);
      await a.close();
      await b.close();
    } finally {
      nodeRedis.destroy();
      io.disconnect();
    }
  }, 60_000);
});
