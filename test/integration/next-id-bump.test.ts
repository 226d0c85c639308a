/** The next_id() repair after a failover: bumpNextId / `idlease next-id bump` (issue 13). */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb, type TestFlavor } from '../helpers/db.js';
import { runCli } from '../helpers/cli.js';
import { migrate } from '../../src/migrations/migrate.js';
import { bumpNextId } from '../../src/next-id/admin.js';
import { nextIdStatus } from '../../src/next-id/attach.js';
import { decodeId, resolveLayout } from '../../src/layout/index.js';
import { isIdleaseError } from '../../src/errors.js';
import { toBigInt } from '../../src/ids.js';

const layout = resolveLayout({ sequenceBits: 10 });

describe.each<TestFlavor>(['postgres', 'pglite'])('bumpNextId on %s', (flavor) => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb(flavor, 'next_id_bump');
    await migrate(db.knex, { segments: false, nextId: { schema: 'nb', sequenceBits: 10 } });
  });
  afterAll(() => db.drop());

  const draw = async () => toBigInt((await db.knex.raw('SELECT nb.next_id() AS id')).rows[0].id);

  it('moves new IDs the given ms past the clock, above every earlier ID, and never lowers the sequence', async () => {
    const before = await draw();
    const t0 = Date.now();
    const r = await bumpNextId(db.knex, { schema: 'nb', aheadMs: 60_000 });
    expect(r.before).not.toBeNull();
    const after = await draw();
    expect(after).toBeGreaterThan(before);
    // A minute ahead of the clock at the bump (the database clock; same host here).
    expect(decodeId(after, layout).unixMs).toBeGreaterThanOrEqual(t0 + 59_000);
    // A smaller bump is a no-op: the sequence stays where it is.
    const again = await bumpNextId(db.knex, { schema: 'nb', aheadMs: 0 });
    expect(again.after).toBe(again.before);
    expect(await draw()).toBeGreaterThan(after);
  });

  it('status: a sequence idle for 10 minutes is no lag (the next draw catches up); a bump shows as lead, not lag', async () => {
    await migrate(db.knex, { segments: false, nextId: { schema: 'nl', sequenceBits: 10 } });
    expect(await nextIdStatus(db.knex, { schema: 'nl' })).toMatchObject({ lagMs: 0, leadMs: 0 }); // never drawn
    // Idle for 10 minutes: the counter's last draw 10 minutes before the clock, as a quiet spell leaves it.
    const tenMinutesAgo = BigInt(Date.now() - 600_000 - layout.epochMs) << 10n;
    await db.knex.raw(`SELECT setval('nl.idlease_next_id_seq', ?)`, [tenMinutesAgo.toString()]);
    const idle = await nextIdStatus(db.knex, { schema: 'nl' });
    expect(idle.lagMs).toBeLessThanOrEqual(10);
    expect(idle.leadMs).toBe(0);
    // And the next ID's time field is indeed on the clock.
    // (Bounds bracket the calls, so a slow answer on a loaded machine cannot fail them.)
    const t = Date.now();
    const id = toBigInt((await db.knex.raw('SELECT nl.next_id() AS id')).rows[0].id);
    const drawn = Date.now();
    expect(decodeId(id, layout).unixMs).toBeGreaterThan(t - 1_000);
    expect(decodeId(id, layout).unixMs).toBeLessThan(drawn + 1_000);
    const bumpedAt = Date.now();
    await bumpNextId(db.knex, { schema: 'nl', aheadMs: 30_000 });
    const ahead = await nextIdStatus(db.knex, { schema: 'nl' });
    const readAt = Date.now();
    expect(ahead.lagMs).toBe(0);
    expect(ahead.leadMs).toBeGreaterThan(28_000 - (readAt - bumpedAt));
    expect(ahead.leadMs).toBeLessThanOrEqual(30_000);
  });

  it('refuses a schema without next_id() and an out-of-range margin, with the fix', async () => {
    const missing = await bumpNextId(db.knex, { schema: 'nothing_here', aheadMs: 10 }).catch((e: unknown) => e);
    expect(isIdleaseError(missing, 'NOT_MIGRATED')).toBe(true);
    expect((missing as Error).message).toContain('idlease migrate --no-segments --next-id --next-id-schema nothing_here');
    expect((missing as Error).message).toContain("migrate(knex, { segments: false, nextId: { schema: 'nothing_here' } })");
    for (const aheadMs of [-1, 1.5, 86_400_001]) {
      const bad = await bumpNextId(db.knex, { schema: 'nb', aheadMs }).catch((e: unknown) => e);
      expect(isIdleaseError(bad, 'BAD_ARGUMENT')).toBe(true);
    }
  });
});

describe('idlease next-id bump (PostgreSQL, real CLI)', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb('postgres', 'next_id_bump_cli');
    await migrate(db.knex, { segments: false, nextId: { schema: 'nc' } });
  });
  afterAll(() => db.drop());

  it('prints the sequence before and after, as JSON with --json', async () => {
    await db.knex.raw('SELECT nc.next_id()');
    const r = await runCli(['--url', db.url, '--json', 'next-id', 'bump', '--next-id-schema', 'nc', '--ahead-ms', '5000']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as { schema: string; before: string; after: string };
    expect(out.schema).toBe('nc');
    expect(BigInt(out.after)).toBeGreaterThan(BigInt(out.before));
    const missing = await runCli(['--url', db.url, 'next-id', 'bump', '--next-id-schema', 'nc']);
    expect(missing.code).toBe(2);
    expect(missing.stderr.trim().split('\n')).toHaveLength(1);
  });
});
