/** `idlease migrate --next-id …` and `idlease decode` through the real CLI entry point. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { decodeId, resolveLayout } from '../../src/layout/index.js';
import { toBigInt } from '../../src/ids.js';
import { runMain } from '../helpers/in-process.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('postgres', 'next_id_cli');
});
afterAll(async () => {
  await db.drop();
});

const run = runMain;

describe('idlease CLI for next_id() on PostgreSQL', () => {
  it('migrate --next-id --shards installs one schema per shard; decode reads the IDs back', async () => {
    const up = await run([
      '--url',
      db.url,
      '--json',
      'migrate',
      '--no-segments',
      '--next-id',
      '--next-id-schema',
      'cli',
      '--shard',
      '2',
      '--shards',
      '2',
      '--sequence-bits',
      '10',
    ]);
    expect(up.err).toBe('');
    expect(up.code).toBe(0);
    expect(JSON.parse(up.out)).toEqual({
      applied: ['next_id:cli_2', 'next_id:cli_2:v2', 'next_id:cli_3', 'next_id:cli_3:v2'],
      direction: 'up',
      moved: [],
    });
    const res = await db.knex.raw('SELECT cli_3.next_id() AS id');
    const id = toBigInt(res.rows[0].id);
    const expected = decodeId(id, resolveLayout({ sequenceBits: 10 }));
    expect(expected.shard).toBe(3);

    const human = await run(['decode', id.toString(), '--sequence-bits', '10']);
    expect(human.code).toBe(0);
    expect(human.out).toContain(`shard 3`);
    expect(human.out).toContain(expected.timestamp.toISOString());
    const json = await run(['--json', 'decode', id.toString(), '--sequence-bits', '10']);
    expect(JSON.parse(json.out)).toEqual({
      id: id.toString(),
      timestamp: expected.timestamp.toISOString(),
      timeMs: expected.timeMs.toString(),
      shard: 3,
      sequence: expected.sequence,
    });

    const down = await run([
      '--url',
      db.url,
      'migrate',
      '--no-segments',
      '--down',
      '--next-id-schema',
      'cli',
      '--shard',
      '2',
      '--shards',
      '2',
    ]);
    expect(down.code).toBe(0);
    expect(down.out).toContain('reverted next_id:cli_3');
  });

  it('refuses bad input with exit code 2 and a message that says what to do', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['decode', 'abc'], /not a decimal ID/],
      [['decode', '9223372036854775808'], /outside/],
      [['decode', '1', '--time-bits', '45', '--shard-bits', '10', '--sequence-bits', '12'], /at most 63/],
      [
        ['--url', db.url, 'migrate', '--no-segments', '--next-id', '--shard', '1024'],
        /--shard must be from 0 to 1023 \(--shard-bits 10\), got 1024/,
      ],
      [['--url', db.url, 'migrate', '--no-segments', '--next-id', '--next-id-schema', 'Bad-Name'], /lower-case SQL identifier/],
      [['--url', db.url, 'migrate', '--no-segments', '--next-id', '--epoch', '2999-01-01'], /in the future/],
    ];
    for (const [args, message] of cases) {
      const r = await run(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.err, args.join(' ')).toMatch(message);
    }
  });
});
