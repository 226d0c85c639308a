/** A database of its own for one bench run on a PostgreSQL server, dropped by `drop()` whatever happened. */
import { connect } from '../src/connect.js';

export interface ScratchDb {
  /** The new database's URL. */
  readonly url: string;
  drop(): Promise<void>;
}

export async function scratchDatabase(serverUrl: string, name: string): Promise<ScratchDb> {
  const admin = connect(serverUrl, { poolMax: 1 });
  await admin.raw(`CREATE DATABASE "${name}"`);
  const u = new URL(serverUrl);
  u.pathname = '/' + name;
  return {
    url: u.toString(),
    async drop() {
      await admin.raw(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).catch(() => undefined);
      await admin.destroy();
    },
  };
}
