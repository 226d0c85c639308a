/**
 * What `npm run build` puts into the template's data directory (scripts/build-pglite-template.mjs,
 * src/embedded/template.ts): idlease's default migrations, exactly as a first `idlease next <tag>`
 * or `idlease migrate` on the embedded database runs them (knex's bookkeeping included, so a
 * later `migrate` finds them done), and then no install id: the first open of each copy writes
 * its own. Loaded by the build only.
 */
import type { Knex } from 'knex';
import { DEFAULT_SCHEMA } from '../dialects/detect.js';
import { clearInstallId } from '../dialects/install.js';
import { knexExecutor } from '../drivers/knex.js';
import { isMigrated, migrate, type MigrateOptions } from './migrate.js';

/** What the embedded database is migrated with when a command names no --schema or --table: the CLI's defaults. */
export const EMBEDDED_DEFAULT_MIGRATION: MigrateOptions = Object.freeze({
  schema: DEFAULT_SCHEMA,
  segments: { table: 'idlease_segments' },
});

/**
 * Migrate a new PGlite database made by initdb (`knex` on it, nothing else run on it yet) as
 * the template, then remove the install id the install migration wrote. The caller writes the
 * marker that asks each copy's first open for its own id, and closes the database cleanly before
 * packing it. Returns the names of the migrations applied.
 */
export async function migrateEmbeddedTemplate(knex: Knex): Promise<readonly string[]> {
  const { applied } = await migrate(knex, EMBEDDED_DEFAULT_MIGRATION);
  const db = knexExecutor(knex);
  if (!(await isMigrated(db, EMBEDDED_DEFAULT_MIGRATION))) throw new Error('the template is not current after migrate');
  await clearInstallId(db, DEFAULT_SCHEMA);
  return applied;
}
