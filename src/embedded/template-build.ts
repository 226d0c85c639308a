/**
 * What `npm run build` puts into the template's data directory (scripts/build-pglite-template.mjs,
 * ./template.ts): idlease's default migrations, exactly as a first `idlease next <tag>` or
 * `idlease migrate` on the embedded database runs them (knex's bookkeeping included, so a later
 * `migrate` finds them done), then no install id and a marker asking the first open of each copy
 * to write one. Loaded by the build only: a CLI run never imports knex's migrator for this.
 */
import type { PGlite } from '@electric-sql/pglite';
import fs from 'node:fs';
import path from 'node:path';
import { connectOpenPGlite } from '../connect.js';
import { DEFAULT_SCHEMA } from '../dialects/detect.js';
import { clearInstallId } from '../dialects/install.js';
import { pgliteExecutor } from '../drivers/pglite.js';
import { isMigrated, migrate, type MigrateOptions } from '../migrations/migrate.js';
import { INSTALL_ID_PENDING } from './template.js';

/** What the embedded database is migrated with when a command names no --schema or --table: the CLI's defaults. */
export const EMBEDDED_DEFAULT_MIGRATION: MigrateOptions = Object.freeze({
  schema: DEFAULT_SCHEMA,
  segments: { table: 'idlease_segments' },
});

/**
 * Migrate the new database `db` (open on `dir`, made by initdb, nothing else run on it) as the
 * template, then leave it without an install id and with the marker. The caller closes `db`
 * cleanly before packing `dir`. Returns the names of the migrations applied.
 */
export async function migrateTemplate(dir: string, db: PGlite): Promise<readonly string[]> {
  const knex = connectOpenPGlite(dir, db, () => {});
  let applied: readonly string[];
  try {
    ({ applied } = await migrate(knex, EMBEDDED_DEFAULT_MIGRATION));
  } finally {
    await knex.destroy();
  }
  const executor = pgliteExecutor(db);
  if (!(await isMigrated(executor, EMBEDDED_DEFAULT_MIGRATION))) throw new Error('the template is not current after migrate');
  await clearInstallId(executor, DEFAULT_SCHEMA);
  fs.writeFileSync(path.join(dir, INSTALL_ID_PENDING), 'the first open of this directory writes its install id\n', { mode: 0o600 });
  return applied;
}
