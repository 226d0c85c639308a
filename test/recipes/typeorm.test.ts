/**
 * docs/recipes/typeorm.md, run as written against PostgreSQL and MariaDB; around each block
 * that synchronizes, the catalog must be what it was apart from the entity's own table.
 */
import { afterAll, expect } from 'vitest';
import { removeSharedModules } from '../docs/run-block.js';
import { describeDocFile } from '../docs/run-file.js';
import { schemaSnapshot } from '../helpers/schema-snapshot.js';
import type { TestFlavor } from '../helpers/db.js';

const ENTITY_TABLES = /\b(orders|invoices)\b/;

afterAll(() => removeSharedModules());
describeDocFile('docs/recipes/typeorm.md', {
  async around(block, ctx) {
    if (!block.code.includes('synchronize: true')) return undefined;
    const db = ctx.dbs[0]!;
    // Everything but the entity's table: idlease's tables (wherever they live), next_id(), its sequence.
    const others = async () => {
      const snap = await schemaSnapshot(db.knex, db.flavor as TestFlavor);
      return Object.fromEntries(
        Object.entries(snap).map(([kind, rows]) => [kind, rows.filter((r) => !ENTITY_TABLES.test(JSON.stringify(r)))]),
      );
    };
    const before = await others();
    expect(JSON.stringify(before)).toMatch(/idlease_segments/);
    return async () => {
      expect(await others()).toEqual(before);
      if (db.flavor === 'postgres') {
        const res = await db.knex.raw(
          `SELECT column_default FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'id'`,
        );
        expect((res as { rows: Array<{ column_default: string }> }).rows).toEqual([{ column_default: 's.next_id()' }]);
      }
    };
  },
});
