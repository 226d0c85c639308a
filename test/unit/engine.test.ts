/**
 * What each engine idlease is tested on says it can do, and how an engine is added: the members
 * code above src/dialects/ reads (test/integration/engine-stand-in.test.ts asks real servers).
 */
import { describe, expect, it } from 'vitest';
import { engineOfFamily, registerEngine, type Engine } from '../../src/dialects/engine.js';
import { planMigrations } from '../../src/migrations/migrate.js';

describe('engines', () => {
  it('MariaDB keeps its objects in the database, PostgreSQL and PGlite in a schema of their own', () => {
    expect(engineOfFamily('mysql')).toMatchObject({
      name: 'MariaDB',
      namespaces: 'database',
      defaultSchema: undefined,
      nextId: 'ticker',
      ticketCounter: 'table',
      supportsStorageEngines: true,
      supportsNoPadCollation: true,
      embedded: false,
    });
    for (const family of ['postgres', 'pglite'] as const) {
      expect(engineOfFamily(family)).toMatchObject({
        namespaces: 'schema',
        defaultSchema: 'idlease',
        nextId: 'function',
        ticketCounter: 'sequence',
        supportsStorageEngines: false,
        supportsNoPadCollation: false,
      });
    }
    expect(engineOfFamily('pglite').embedded).toBe(true);
    expect(engineOfFamily('mysql').quote('order')).toBe('`order`');
    expect(engineOfFamily('postgres').quote('order')).toBe('"order"');
  });

  it('recognizes the servers by their version strings, most specific first', () => {
    const pglite = 'PostgreSQL 18.6 (PGlite 0.5.16) on wasm32-unknown-emscripten, 32-bit';
    expect(engineOfFamily('pglite').recognizes(pglite)).toBe(true);
    expect(engineOfFamily('postgres').recognizes('PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu')).toBe(true);
    expect(engineOfFamily('postgres').recognizes('CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu)')).toBe(false);
    expect(engineOfFamily('mysql').recognizes('10.11.19-MariaDB-0+deb12u1')).toBe(true);
    expect(engineOfFamily('mysql').recognizes('8.4.3')).toBe(false);
  });

  it('plans by the members of the engine it is given, a registered stand-in as well', () => {
    const standIn: Engine = { ...engineOfFamily('postgres'), name: 'StandIn', defaultSchema: 'elsewhere', supportsStorageEngines: true };
    const remove = registerEngine(standIn);
    try {
      expect(planMigrations(standIn).schema).toBe('elsewhere');
      // A member, not the family, decides what is refused: tickets.engine on PostgreSQL's family passes here.
      expect(() => planMigrations(standIn, { tickets: { engine: 'InnoDB' } })).not.toThrow();
      expect(() => planMigrations('postgres', { tickets: { engine: 'InnoDB' } })).toThrow(/applies to MySQL\/MariaDB only/);
    } finally {
      remove();
    }
  });
});
