import { describe, expect, it } from 'vitest';
import { planMigrations } from '../../src/migrations/migrate.js';
import { IdleaseError } from '../../src/errors.js';
import { isIdleaseMigration, objectsOfMigration } from '../../src/migrations/relocate.js';
import { resolveSnowflakeOptions } from '../../src/snowflake/options.js';

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (e) {
    return e instanceof IdleaseError ? e.code : `not IdleaseError: ${String(e)}`;
  }
  return undefined;
}

describe('migrate options are validated before any SQL runs', () => {
  it('defaults to the segment table in idlease_migrations', () => {
    const plan = planMigrations('postgres');
    expect(plan.migrations.map((m) => m.name)).toEqual([
      'segments:idlease_segments',
      'segments:idlease_segments:v2',
      'segments:idlease_segments:v3',
      'install:idlease_install',
    ]);
    expect(plan.migrationsTable).toBe('idlease_migrations');
    expect(Object.isFrozen(plan)).toBe(true);
  });

  it("puts idlease's tables in schema idlease on PostgreSQL and PGlite, the connection's database on MySQL", () => {
    expect(planMigrations('postgres').schema).toBe('idlease');
    expect(planMigrations('pglite').schema).toBe('idlease');
    expect(planMigrations('postgres', { schema: 'public' }).schema).toBe('public');
    expect(planMigrations('mysql').schema).toBeUndefined();
  });

  it('knows which tables and sequences each recorded migration created (what a move takes along)', () => {
    expect(objectsOfMigration('segments:id_segments')).toEqual(['id_segments']);
    expect(objectsOfMigration('workers:idlease_workers')).toEqual(['idlease_workers']);
    expect(objectsOfMigration('tickets:orders')).toEqual(['idlease_tickets_orders', 'idlease_ticket_schemes']);
    expect(objectsOfMigration('20261122000001_segments.ts')).toEqual(['idlease_segments']);
    expect(objectsOfMigration('20261122000002_tickets.js')).toEqual(['idlease_tickets_default', 'idlease_ticket_schemes']);
    expect(objectsOfMigration('20261123000004_workers.ts')).toEqual(['idlease_workers']);
    // next_id() stays in the schema the user chose.
    expect(objectsOfMigration('next_id:public')).toEqual([]);
    expect(objectsOfMigration('next_id:public:v2')).toEqual([]);
    expect(objectsOfMigration('20261122000003_next_id.ts')).toEqual([]);
  });

  it("takes only idlease's own migration names for idlease's: an app file that ends in _segments is not one", () => {
    expect(isIdleaseMigration('20261122000001_segments.js')).toBe(true);
    expect(isIdleaseMigration('next_id:public:v2')).toBe(true);
    expect(isIdleaseMigration('20250101000000_segments.js')).toBe(false);
    expect(objectsOfMigration('20250101000000_segments.js')).toEqual([]);
    expect(isIdleaseMigration('20250101000000_create_users.js')).toBe(false);
    expect(isIdleaseMigration('users:create')).toBe(false);
  });

  it.each([
    ['unknown option', { segmnts: true }],
    ['bad schema identifier', { schema: 'public; drop table x' }],
    ['upper-case identifier', { segments: { table: 'Segments' } }],
    ['identifier too long', { segments: { table: 'x'.repeat(64) } }],
    ['bad migrations table', { migrationsTable: 'a-b' }],
    ['bad direction', { direction: 'sideways' }],
    ['negative lock timeout', { lockTimeoutMs: -1 }],
  ])('refuses %s with BAD_CONFIG', (_label, options) => {
    expect(codeOf(() => planMigrations('postgres', options as never))).toBe('BAD_CONFIG');
  });

  it('refuses a Postgres schema on MySQL and says what to do instead', () => {
    expect(() => planMigrations('mysql', { schema: 'ids' })).toThrow(/database name in the connection/);
  });

  it('refuses a next_id() schema or several shards on MySQL (one shard per database there)', () => {
    expect(codeOf(() => planMigrations('mysql', { nextId: { schema: 'ids', shard: 1 } }))).toBe('BAD_CONFIG');
    expect(() => planMigrations('mysql', { nextId: { shard: 1, shards: 2 } })).toThrow(/leave out schema and shards/);
  });

  it('names the offending value and a fix in the message', () => {
    expect(() => planMigrations('postgres', { segments: { table: 'bad name' } })).toThrow(/segments\.table .*"bad name".*Example/);
  });
});

describe('the worker table name leaves room for its instance marker (<table>_instance)', () => {
  it('54 characters are accepted, 55 refused with BAD_CONFIG, by migrate and by the allocator', () => {
    const ok = 'w'.repeat(54);
    const long = 'w'.repeat(55);
    expect(planMigrations('postgres', { workers: { table: ok } }).migrations.map((m) => m.name)).toEqual([
      'segments:idlease_segments',
      'segments:idlease_segments:v2',
      'segments:idlease_segments:v3',
      'install:idlease_install',
      `workers:${ok}`,
      `workers:${ok}:v2`,
    ]);
    expect(() => planMigrations('mysql', { workers: { table: long } })).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
    const store = { claim: () => Promise.resolve(undefined) } as never;
    expect(() => resolveSnowflakeOptions({ store, table: long })).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
    expect(resolveSnowflakeOptions({ store, table: ok }).table).toBe(ok);
  });
});
