import { installTableDdl, INSTALL_TABLE, writeInstallId } from '../dialects/install.js';
import type { Flavor } from '../dialects/detect.js';
import { knexExecutor } from '../drivers/knex.js';
import type { IdleaseMigration } from './types.js';

/**
 * The install id table (dialects/install.ts): created with one random id the first time, left as
 * it is afterwards. Dropping it is allowed (nothing issues from it): a later migrate writes a new
 * id, and Redis sequence keys bound to the old one are refused until their prefix changes.
 */
export function installMigrations(flavor: Flavor, schema: string | undefined): IdleaseMigration[] {
  const ddl = installTableDdl(flavor, schema);
  return [
    {
      name: `install:${INSTALL_TABLE}`,
      up: async (knex) => {
        await knex.raw(ddl.create);
        await writeInstallId(knexExecutor(knex), schema);
      },
      down: async (knex) => {
        await knex.raw(ddl.down);
      },
    },
  ];
}
