/** `idlease migrate --tickets`, `tickets next|status|reshard` as real processes on MariaDB. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';

describe('idlease tickets CLI on MariaDB', () => {
  let dbs: TestDb[];
  beforeAll(async () => {
    dbs = await Promise.all([1, 2, 3].map((i) => createTestDb('mysql', `tick_cli${i}`)));
  });
  afterAll(async () => {
    await Promise.all(dbs.map((d) => d.drop()));
  });

  it('migrates, draws, reports status, reshards 2 → 3 servers', async () => {
    const [one, two, three] = dbs as [TestDb, TestDb, TestDb];
    const m1 = await runCli([
      '--url',
      one.url,
      'migrate',
      '--no-segments',
      '--tickets',
      '--tickets-increment',
      '2',
      '--tickets-offset',
      '1',
    ]);
    expect(m1.stderr).toBe('');
    expect(m1.code).toBe(0);
    expect(m1.stdout).toContain('tickets:default');
    const m2 = await runCli([
      '--url',
      two.url,
      'migrate',
      '--no-segments',
      '--tickets',
      '--tickets-engine',
      'MyISAM',
      '--tickets-increment',
      '2',
      '--tickets-offset',
      '2',
    ]);
    expect(m2.code).toBe(0);
    expect((await runCli(['--url', three.url, 'migrate', '--no-segments', '--tickets'])).code).toBe(0);

    const next = await runCli(['--json', 'tickets', 'next', '-n', '4', '--server', one.url, '--server', two.url]);
    expect(next.code).toBe(0);
    const ids = (JSON.parse(next.stdout) as { ids: string[] }).ids;
    expect(ids).toHaveLength(4);
    for (const id of ids) expect(typeof id).toBe('string');
    expect(ids.map((x) => BigInt(x) % 2n)).toEqual([1n, 0n, 1n, 0n]);

    const status = await runCli(['--json', 'tickets', 'status', '--server', one.url, '--server', two.url]);
    expect(status.code).toBe(0);
    const st = JSON.parse(status.stdout) as { servers: Array<Record<string, unknown>> };
    expect(st.servers.map((s) => [s.health, s.offset, s.increment, s.sessionOffset, s.sessionIncrement, s.engine])).toEqual([
      ['up', 1, 2, 1, 2, 'InnoDB'],
      ['up', 2, 2, 2, 2, 'MyISAM'],
    ]);
    expect(st.servers[0]!.lastId).toBe(ids[2]);

    const bad = await runCli(['tickets', 'next', '--server', one.url, '--server', two.url, '--offsets', '1,1']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('BAD_CONFIG');

    const re = await runCli(['--json', 'tickets', 'reshard', '--server', one.url, '--server', two.url, '--server', three.url]);
    expect(re.stderr).toBe('');
    expect(re.code).toBe(0);
    const r = JSON.parse(re.stdout) as { globalMax: string; increment: number };
    expect(r.increment).toBe(3);
    expect(BigInt(r.globalMax) >= BigInt(ids[3]!)).toBe(true);

    const after = await runCli(['--json', 'tickets', 'next', '-n', '3', '--server', one.url, '--server', two.url, '--server', three.url]);
    expect(after.code).toBe(0);
    const ids2 = (JSON.parse(after.stdout) as { ids: string[] }).ids.map(BigInt);
    expect(ids2.map((x) => x % 3n)).toEqual([1n, 2n, 0n]);
    for (const id of ids2) expect(id > BigInt(r.globalMax)).toBe(true);
    expect(new Set([...ids, ...ids2.map(String)]).size).toBe(7);

    // The old two-server layout is now refused: the servers' schemes say increment 3.
    const stale = await runCli(['tickets', 'next', '--server', one.url, '--server', two.url]);
    expect(stale.code).toBe(2);
    expect(stale.stderr).toMatch(/BAD_CONFIG.*reshard/);
  });
});
