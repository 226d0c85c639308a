/**
 * A row inserted by hand on a PostgreSQL primary is marked with the primary's instance (the
 * `instance` column's DEFAULT), so it starts at max_id + 1 there — and the same row, replicated to a
 * streaming standby that is then promoted (pg_basebackup -R, `pg_ctl promote`: a new timeline), names
 * the old instance on the new primary, whose first lease still jumps by the failover gap. The default
 * is evaluated where the row is inserted, not replayed on the standby: what makes it safe.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { createSegmentAllocator, listTags } from '../../src/segment/index.js';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';

const GAP = 1_000_000n;

describe('a hand-made row and a promoted PostgreSQL standby', () => {
  let primary: PostgresInstance | undefined;
  let standby: PostgresInstance | undefined;
  const handles: Knex[] = [];
  beforeAll(async () => {
    primary = await startPostgres({ settings: { wal_level: 'replica', max_wal_senders: '4', hot_standby: 'on' } });
    standby = await startPostgres({ standbyOf: primary.port, settings: { hot_standby: 'on' } });
  });
  afterAll(async () => {
    await Promise.all(handles.map((k) => k.destroy()));
    await standby?.destroy();
    await primary?.destroy();
  });

  const first = async (knex: Knex, tag: string): Promise<bigint> => {
    const a = createSegmentAllocator({ knex, tag, minStep: 10, maxStep: 10 });
    try {
      return await a.next();
    } finally {
      await a.close();
    }
  };

  it('starts at max_id + 1 on the primary; on the promoted standby its first lease jumps past the gap', async () => {
    const p = connect(primary!.url, { poolMax: 2 });
    const s = connect(standby!.url, { poolMax: 2 });
    handles.push(p, s);
    await migrate(p);
    const insert = (tag: string) =>
      p.raw('INSERT INTO idlease.idlease_segments (tag, max_id, step, failover_gap) VALUES (?, 0, 1000, ?)', [tag, GAP.toString()]);
    await insert('here');
    await insert('there');
    expect(await first(p, 'here')).toBe(1n);
    const maxIdOf = async (k: Knex): Promise<string | undefined> => {
      const r = (await k.raw("SELECT max_id::text AS m FROM idlease.idlease_segments WHERE tag = 'here'").catch(() => ({ rows: [] }))) as {
        rows: Array<{ m: string }>;
      };
      return r.rows[0]?.m;
    };
    const leased = await maxIdOf(p);
    // The standby replays both rows (and the lease) before it is promoted.
    for (let i = 0; i < 200; i++) {
      if ((await maxIdOf(s)) === leased) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await standby!.promote();
    for (let i = 0; i < 200; i++) {
      const r = (await s.raw('SELECT pg_is_in_recovery() AS rec')) as { rows: Array<{ rec: boolean }> };
      if (!r.rows[0]!.rec) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    // Never leased on the old primary: still the jump, from 0.
    expect(await first(s, 'there')).toBe(2n * GAP + 1n);
    // Leased on the old primary (what close() gave back aside): the jump from there.
    expect(await first(s, 'here')).toBe(2n * GAP + 1n);
    const rows = await listTags(s);
    expect(rows.map((r) => [r.tag, r.jumps])).toEqual([
      ['here', 1],
      ['there', 1],
    ]);
  });
});
