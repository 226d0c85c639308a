/**
 * A textual picture of everything a migration can create in the test database (tables,
 * columns, indexes, constraints, engines, functions, sequences and what owns them, comments,
 * schemas), so two databases can be compared: "down then up", "an older install upgraded"
 * (next_id() version 1, the layout in public before idlease had a schema of its own) must
 * each equal "fresh install".
 */
import type { Knex } from 'knex';
import type { TestFlavor } from './db.js';

async function rows(knex: Knex, flavor: TestFlavor, sql: string): Promise<unknown[]> {
  const res = await knex.raw(sql);
  return flavor === 'mysql' ? (res as [unknown[]])[0] : (res as { rows: unknown[] }).rows;
}

export async function schemaSnapshot(knex: Knex, flavor: TestFlavor): Promise<Record<string, unknown[]>> {
  if (flavor === 'mysql') {
    return {
      tables: await rows(
        knex,
        flavor,
        `SELECT table_name, engine, table_collation FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY 1`,
      ),
      columns: await rows(
        knex,
        flavor,
        `SELECT table_name, column_name, ordinal_position, column_default, is_nullable, column_type, extra FROM information_schema.columns WHERE table_schema = DATABASE() ORDER BY 1, 3`,
      ),
      indexes: await rows(
        knex,
        flavor,
        `SELECT table_name, index_name, non_unique, seq_in_index, column_name FROM information_schema.statistics WHERE table_schema = DATABASE() ORDER BY 1, 2, 4`,
      ),
      checks: await rows(
        knex,
        flavor,
        `SELECT constraint_name, check_clause FROM information_schema.check_constraints WHERE constraint_schema = DATABASE() ORDER BY 1`,
      ),
      routines: await rows(
        knex,
        flavor,
        `SELECT routine_name, routine_type, routine_definition FROM information_schema.routines WHERE routine_schema = DATABASE() ORDER BY 1`,
      ),
    };
  }
  const userSchemas = `NOT IN ('pg_catalog', 'information_schema', 'pg_toast')`;
  return {
    schemas: await rows(
      knex,
      flavor,
      `SELECT nspname FROM pg_namespace WHERE nspname ${userSchemas} AND nspname NOT LIKE 'pg_temp%' AND nspname NOT LIKE 'pg_toast%' ORDER BY 1`,
    ),
    columns: await rows(
      knex,
      flavor,
      `SELECT table_schema, table_name, column_name, ordinal_position, column_default, is_nullable, data_type, character_maximum_length FROM information_schema.columns WHERE table_schema ${userSchemas} ORDER BY 1, 2, 4`,
    ),
    indexes: await rows(
      knex,
      flavor,
      `SELECT schemaname, tablename, indexname, indexdef FROM pg_indexes WHERE schemaname ${userSchemas} ORDER BY 1, 2, 3`,
    ),
    constraints: await rows(
      knex,
      flavor,
      `SELECT n.nspname, c.conrelid::regclass::text AS rel, c.conname, pg_get_constraintdef(c.oid) AS def FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname ${userSchemas} ORDER BY 1, 2, 3`,
    ),
    functions: await rows(
      knex,
      flavor,
      `SELECT n.nspname, p.proname, pg_get_function_identity_arguments(p.oid) AS args, pg_get_functiondef(p.oid) AS def FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname ${userSchemas} ORDER BY 1, 2, 3`,
    ),
    sequences: await rows(
      knex,
      flavor,
      `SELECT schemaname, sequencename, start_value::text, increment_by::text, min_value::text, max_value::text, cycle FROM pg_sequences WHERE schemaname ${userSchemas} ORDER BY 1, 2`,
    ),
    // Every table and sequence with the schema it sits in and, for a sequence, the column that
    // owns it: an upgrade that moved a table but left its serial's sequence behind differs here.
    relations: await rows(
      knex,
      flavor,
      `SELECT n.nspname, c.relname, c.relkind::text AS kind, o.refobjid::regclass::text AS owned_by FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_depend o ON o.classid = 'pg_class'::regclass AND o.objid = c.oid AND o.deptype = 'a' AND o.refclassid = 'pg_class'::regclass WHERE n.nspname ${userSchemas} AND c.relkind IN ('r', 'p', 'S', 'v') ORDER BY 1, 2`,
    ),
    comments: await rows(
      knex,
      flavor,
      `SELECT n.nspname, c.relname AS name, d.description FROM pg_description d JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND d.objoid = c.oid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname ${userSchemas} UNION ALL SELECT n.nspname, p.proname, d.description FROM pg_description d JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND d.objoid = p.oid JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname ${userSchemas} ORDER BY 1, 2, 3`,
    ),
  };
}
