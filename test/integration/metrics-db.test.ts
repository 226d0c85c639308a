/**
 * collectMetrics on real databases for the allocators the segment-only tests leave out: ticket
 * servers (MariaDB tables, PostgreSQL sequences) with one server down, and snowflake worker ids
 * on every database. What is exported must be what the allocators did.
 */
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';
import { collectMetrics } from '../../src/metrics/index.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { createTicketAllocator } from '../../src/ticket/index.js';
import { ALL_FLAVORS, createTestDb, type TestDb } from '../helpers/db.js';
import { waitFor } from '../helpers/wait.js';

/** One sample from Prometheus text; NaN when the series is absent. */
function sample(text: string, name: string, labels = ''): number {
  const line = text.split('\n').find((l) => l.startsWith(labels ? `${name}{${labels}} ` : `${name} `));
  const value = line?.split(' ').at(-1);
  return value === undefined ? NaN : value === '+Inf' ? Infinity : Number(value);
}

const DEAD = { mysql: 'mysql://root@127.0.0.1:1/test', postgres: 'postgres://postgres@127.0.0.1:1/test' } as const;

describe.each(['mysql', 'postgres'] as const)('ticket metrics on %s', (flavor) => {
  const dbs: TestDb[] = [];
  let dead: Knex;
  beforeAll(async () => {
    dbs.push(await createTestDb(flavor, 'tmetrics1'), await createTestDb(flavor, 'tmetrics2'));
    await migrate(dbs[0]!.knex, { segments: false, tickets: { increment: 3, offset: 1 } });
    await migrate(dbs[1]!.knex, { segments: false, tickets: { increment: 3, offset: 2 } });
    dead = connect(DEAD[flavor], { poolMax: 1 });
  });
  afterAll(async () => {
    await dead?.destroy();
    await Promise.all(dbs.map((d) => d.drop()));
  });

  it('per server: IDs served, up/down, failures and when; timeouts when every server is down', async () => {
    const registry = new Registry();
    const tickets = createTicketAllocator({
      servers: [
        { knex: dbs[0]!.knex, offset: 1, name: 'a' },
        { knex: dbs[1]!.knex, offset: 2, name: 'b' },
        { knex: dead, offset: 3, name: 'gone' },
      ],
      increment: 3,
      timeoutMs: 2_000,
      backoffInitialMs: 60_000,
    });
    const allDown = createTicketAllocator({ servers: [{ knex: dead, offset: 3, name: 'gone' }], increment: 3, timeoutMs: 300 });
    collectMetrics(registry, tickets, allDown);
    try {
      const fresh = await registry.metrics();
      for (const server of ['a', 'b', 'gone']) {
        expect(sample(fresh, 'idlease_ticket_ids_served_total', `server="${server}"`)).toBe(0);
        expect(sample(fresh, 'idlease_ticket_server_failures_total', `server="${server}"`)).toBe(0);
      }
      expect(sample(fresh, 'idlease_ticket_timeouts_total')).toBe(0);
      const ids: bigint[] = [];
      for (let i = 0; i < 30; i++) ids.push(await tickets.next());
      expect(new Set(ids).size).toBe(30);
      await expect(allDown.next()).rejects.toMatchObject({ code: 'DB_UNAVAILABLE' });
      const text = await registry.metrics();
      const byServer = new Map(tickets.stats().servers.map((s) => [s.name, s]));
      const served = (name: string) => sample(text, 'idlease_ticket_ids_served_total', `server="${name}"`);
      expect(served('a')).toBe(byServer.get('a')!.served);
      expect(served('b')).toBe(byServer.get('b')!.served);
      expect(served('a') + served('b')).toBe(30);
      expect(served('a')).toBeGreaterThan(0);
      expect(served('b')).toBeGreaterThan(0);
      expect(served('gone')).toBe(0);
      expect(sample(text, 'idlease_ticket_server_up', 'server="a"')).toBe(1);
      expect(sample(text, 'idlease_ticket_server_up', 'server="b"')).toBe(1);
      // Both allocators name their dead server "gone": down in each, failures added up.
      expect(sample(text, 'idlease_ticket_server_up', 'server="gone"')).toBe(0);
      expect(sample(text, 'idlease_ticket_server_failures_total', 'server="gone"')).toBe(
        byServer.get('gone')!.failures + allDown.stats().servers[0]!.failures,
      );
      expect(sample(text, 'idlease_ticket_server_failures_total', 'server="gone"')).toBeGreaterThan(0);
      expect(sample(text, 'idlease_ticket_last_error_timestamp_seconds', 'server="a"')).toBe(0);
      expect(sample(text, 'idlease_ticket_last_error_timestamp_seconds', 'server="gone"') * 1000).toBeGreaterThan(Date.now() - 60_000);
      expect(sample(text, 'idlease_ticket_lock_conflicts_total', 'server="a"')).toBe(0);
      expect(sample(text, 'idlease_ticket_timeouts_total')).toBe(1);
    } finally {
      await Promise.all([tickets.close(), allDown.close()]);
    }
  });
});

describe.each(ALL_FLAVORS)('snowflake metrics on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'sfmetrics');
    await migrate(db.knex, { segments: false, workers: true });
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('IDs issued, the worker id held, claims, renewals and their latency; a second holder gets the next id; stop() removes one', async () => {
    const registry = new Registry();
    const a = createSnowflakeAllocator({ knex: db.knex, group: 'api', leaseTtlMs: 1_500 });
    const stopA = collectMetrics(registry, a);
    try {
      const fresh = await registry.metrics();
      expect(sample(fresh, 'idlease_snowflake_ids_issued_total', 'group="api"')).toBe(0);
      expect(sample(fresh, 'idlease_snowflake_renewal_duration_seconds_count', 'group="api"')).toBe(0);
      await a.nextBatch(100);
      // A renewal every leaseTtlMs/3: wait for one after the claim's.
      await waitFor(() => a.stats().renewals >= 2, { timeoutMs: 5_000, what: "a renewal after the claim's" });
      const b = createSnowflakeAllocator({ knex: flavor === 'pglite' ? db.knex : db.another(), group: 'api' });
      collectMetrics(registry, b);
      await b.next();
      const text = await registry.metrics();
      const [sa, sb] = [a.stats(), b.stats()];
      expect(sample(text, 'idlease_snowflake_ids_issued_total', 'group="api"')).toBe(101);
      expect(sample(text, 'idlease_snowflake_claims_total', 'group="api"')).toBe(2);
      expect(sa.renewals).toBeGreaterThanOrEqual(2);
      expect(sample(text, 'idlease_snowflake_renewals_total', 'group="api"')).toBe(sa.renewals + sb.renewals);
      expect(sample(text, 'idlease_snowflake_renewal_duration_seconds_count', 'group="api"')).toBe(sa.renewals + sb.renewals);
      expect(sample(text, 'idlease_snowflake_lease_valid', 'group="api"')).toBe(2);
      expect([sa.workerId, sb.workerId]).toEqual([0, 1]);
      expect(sample(text, 'idlease_snowflake_worker_id', 'group="api"')).toBe(1);
      expect(sample(text, 'idlease_snowflake_lease_errors_total', 'group="api"')).toBe(0);
      expect(sample(text, 'idlease_snowflake_leases_lost_total', 'group="api"')).toBe(0);
      expect(sample(text, 'idlease_snowflake_timeouts_total', 'group="api"')).toBe(0);
      // A fresh install is marked by migrate: no claim waited.
      expect(sample(text, 'idlease_snowflake_failover_waits_total', 'group="api"')).toBe(0);
      expect(sample(text, 'idlease_snowflake_lead_seconds', 'group="api"')).toBeGreaterThanOrEqual(0);
      // A closed allocator holds nothing; a stopped one leaves the sums.
      await b.close();
      stopA();
      const later = await registry.metrics();
      expect(sample(later, 'idlease_snowflake_ids_issued_total', 'group="api"')).toBe(1);
      expect(sample(later, 'idlease_snowflake_worker_id', 'group="api"')).toBe(-1);
      expect(sample(later, 'idlease_snowflake_lease_valid', 'group="api"')).toBe(0);
    } finally {
      await a.close();
    }
  });

  it.each(flavor === 'pglite' ? [] : ['down'])('a database that is %s: lease errors, no valid lease, worker id -1, a timeout', async () => {
    const dead = connect(DEAD[flavor as 'mysql' | 'postgres'], { poolMax: 1 });
    const registry = new Registry();
    const a = createSnowflakeAllocator({ knex: dead, group: 'api', waitTimeoutMs: 300 });
    collectMetrics(registry, a);
    try {
      await expect(a.next()).rejects.toMatchObject({ code: 'DB_UNAVAILABLE' });
      const text = await registry.metrics();
      expect(sample(text, 'idlease_snowflake_lease_errors_total', 'group="api"')).toBe(a.stats().leaseErrors);
      expect(a.stats().leaseErrors).toBeGreaterThan(0);
      expect(sample(text, 'idlease_snowflake_lease_valid', 'group="api"')).toBe(0);
      expect(sample(text, 'idlease_snowflake_worker_id', 'group="api"')).toBe(-1);
      expect(sample(text, 'idlease_snowflake_timeouts_total', 'group="api"')).toBe(1);
    } finally {
      await a.close();
      await dead.destroy();
    }
  });
});
