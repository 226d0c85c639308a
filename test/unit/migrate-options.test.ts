import { describe, expect, it } from 'vitest';
import { planMigrations } from '../../src/migrations/migrate.js';
import { IdleaseError } from '../../src/errors.js';

function codeOf(fn: () => unknown): string | undefined {
  try { fn(); } catch (e) { return e instanceof IdleaseError ? e.code : `not IdleaseError: ${String(e)}`; }
  return undefined;
}

describe('migrate options are validated before any SQL runs', () => {
  it('defaults to the segment table in idlease_migrations', () => {
    const plan = planMigrations('postgres');
    expect(plan.migrations.map((m) => m.name)).toEqual(['segments:idlease_segments']);
    expect(plan.migrationsTable).toBe('idlease_migrations');
    expect(Object.isFrozen(plan)).toBe(true);
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

  it('refuses next_id() on MySQL', () => {
    expect(codeOf(() => planMigrations('mysql', { nextId: true }))).toBe('BAD_CONFIG');
  });

  it('names the offending value and a fix in the message', () => {
    expect(() => planMigrations('postgres', { segments: { table: 'bad name' } })).toThrow(/segments\.table .*"bad name".*Example/);
  });
});
