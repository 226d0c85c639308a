/**
 * Two PostgreSQL promotions in a row, the second before its standby received anything the first
 * new primary wrote (issue 42: a second failover before anyone acts). P (timeline 1) leases; its
 * standby A is promoted losing P's last writes (timeline 2); B is a fresh standby of A, its
 * receiver cut before A's first lease — the jump — so B never gets it; A leases (jumps) and is
 * killed; B is promoted (timeline 3) with A's jump lost. B's first lease finds the row as P left
 * it, like A's did: a jump of one gap from there would land exactly where A's did and repeat every
 * ID A handed out. The jump counts timelines: B lands one gap past A.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { Knex } from 'knex';
import { connect } from '../../src/connect.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator, listTags } from '../../src/segment/index.js';
import { startPostgres, type PostgresInstance } from '../helpers/servers.js';
import { promotePgLosingWrites, startStandby } from '../helpers/pg-replicas.js';

const GAP = 1_000_000n;

describe('two PostgreSQL promotions in a row, the second losing the first one’s jump', () => {
  const servers: PostgresInstance[] = [];
  const handles: Knex[] = [];
  afterAll(async () => {
    await Promise.all(handles.map((k) => k.destroy()));
    await Promise.allSettled(servers.map((s) => s.destroy()));
  });
  const open = (s: PostgresInstance) => {
    const k = connect(s.url, { poolMax: 2 });
    handles.push(k);
    return k;
  };
  const draw = async (knex: Knex, n: number): Promise<bigint[]> => {
    const a = createSegmentAllocator({ knex, tag: 'two', minStep: 100, maxStep: 100 });
    try {
      return await a.nextBatch(n);
    } finally {
      await a.close();
    }
  };

  it('timeline 1 → 2 → 3: the second promotion jumps past the first one’s jump; no ID twice', async () => {
    const p = await startPostgres();
    servers.push(p);
    await migrate(open(p));
    await addTag(open(p), { tag: 'two', step: 100, failoverGap: GAP });
    const onP = await draw(open(p), 250);

    const a = await startStandby(p.port);
    servers.push(a);
    await promotePgLosingWrites({ standby: a, loseMs: 0, killOld: () => p.kill() });
    const b = await startStandby(a.port);
    servers.push(b);
    const onA: bigint[] = [];
    // B stops receiving before A's first lease: A's jump never reaches it.
    await promotePgLosingWrites({
      standby: b,
      loseMs: 0,
      killOld: async () => {
        onA.push(...(await draw(open(a), 250)));
        await a.kill();
      },
    });
    const onB = await draw(open(b), 250);

    const all = [...onP, ...onA, ...onB];
    expect(new Set(all.map(String)).size, `P ${onP[0]}…, A ${onA[0]}…, B ${onB[0]}…`).toBe(all.length);
    // A jumped to the next-but-one multiple above P's row; B, two timelines on, one gap further.
    expect(onA[0]).toBe(2n * GAP + 1n);
    expect(onB[0]).toBe(3n * GAP + 1n);
    const row = (await listTags(open(b))).find((r) => r.tag === 'two')!;
    expect(row.instance).toBe('pg:tl00000003');
    expect(row.jumps).toBe(1);
  });
});
