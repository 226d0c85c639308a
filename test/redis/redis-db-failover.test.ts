/**
 * The database fails over asynchronously under an intact Redis: the standby, promoted behind a
 * TCP switch, missed the last window leases, so its segment row is below what Redis already
 * issued. The Redis sequences finish the windows they hold (leased from the old primary: still
 * unique); the first window leased on the promoted standby jumps the row by the tag's failover
 * gap in the lease statement, so they go on above everything, with no refusal and no bump.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createClient } from 'redis';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';
import { startTcpSwitch, type TcpSwitch } from '../helpers/tcp-switch.js';
import { startRedis, type RedisServer } from '../helpers/redis.js';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag } from '../../src/segment/admin.js';
import { createRedisSequence, redisKeyStatus, type RedisSequence } from '../../src/redis-sequence/index.js';
import { isIdleaseError } from '../../src/errors.js';

const stops: Array<() => Promise<unknown> | unknown> = [];
afterAll(async () => {
  for (const stop of stops.reverse()) await stop();
});

describe('a Redis sequence through an asynchronous PostgreSQL failover, Redis intact', () => {
  it('no operator step: the first window on the promoted standby jumps by the failover gap, no refusal, no duplicate', async () => {
    const primary: PostgresInstance = await startPostgres({ settings: { wal_level: 'replica', max_wal_senders: '4', hot_standby: 'on' } });
    stops.push(() => primary.destroy());
    const standby: PostgresInstance = await startPostgres({ standbyOf: primary.port, settings: { hot_standby: 'on' } });
    stops.push(() => standby.destroy());
    const vip: TcpSwitch = await startTcpSwitch(primary.port);
    stops.push(() => vip.close());
    const redis: RedisServer = await startRedis('none');
    stops.push(() => redis.destroy());

    const knex = connect(`postgres://postgres@127.0.0.1:${vip.port}/postgres`, { poolMax: 4 });
    stops.push(() => knex.destroy());
    await migrate(knex);
    await addTag(knex, { tag: 'dbfail', step: 50 });
    const clients = await Promise.all(
      [0, 1].map(async () => {
        const c = createClient({ socket: { port: redis.port, host: '127.0.0.1' } });
        c.on('error', () => undefined);
        await c.connect();
        stops.push(() => c.destroy());
        return c;
      }),
    );
    const make = (i: number): RedisSequence =>
      createRedisSequence({
        redis: clients[i]!,
        knex,
        tag: 'dbfail',
        minStep: 50,
        maxStep: 50,
        waitTimeoutMs: 3_000,
        retryMaxMs: 200,
        statementTimeoutMs: 1_000,
      });
    const seqs = [make(0), make(1)];
    const seen = new Set<bigint>();
    let duplicates = 0;
    const take = async (s: RedisSequence, n: number) => {
      for (let k = 0; k < n; k++) {
        const id = await s.next();
        if (seen.has(id)) duplicates++;
        seen.add(id);
      }
    };
    await Promise.all(seqs.map((s) => take(s, 300)));
    // The standby stops replaying: every lease from here on is lost in the failover.
    await standby.stop();
    await Promise.all(seqs.map((s) => take(s, 300)));
    const issuedBefore = (await redisKeyStatus(clients[0], 'dbfail')).high;
    await primary.kill();
    await standby.start();
    await standby.promote();
    vip.pointTo(standby.port);

    // Calls fail with DB_UNAVAILABLE while no database answers; then the first window leased on
    // the promoted standby jumps its row by the failover gap (in the lease statement): no refusal,
    // no operator step, and every ID from there on above everything Redis issued before.
    const errors: unknown[] = [];
    let unavailable = 0;
    const after = new Set<bigint>();
    await Promise.all(
      seqs.map(async (s) => {
        for (let attempt = 0; attempt < 50; attempt++) {
          try {
            for (let k = 0; k < 1_000; k++) {
              const id = await s.next();
              if (seen.has(id)) duplicates++;
              seen.add(id);
              after.add(id);
            }
            return;
          } catch (err) {
            if (isIdleaseError(err, 'DB_UNAVAILABLE')) unavailable++;
            else return void errors.push(err);
          }
        }
      }),
    );
    console.log(`database failover: ${unavailable} calls DB_UNAVAILABLE during the outage, ${errors.length} other errors`);
    expect(duplicates).toBe(0);
    expect(errors.map(String)).toEqual([]);
    expect(seqs.reduce((n, s) => n + s.stats().regressions, 0)).toBe(0);
    // The windows held from the old primary are finished first; what comes after is above the gap.
    expect([...after].some((id) => id > issuedBefore + 1_000_000n)).toBe(true);
    await Promise.all(seqs.map((s) => s.close()));
  }, 120_000);
});
