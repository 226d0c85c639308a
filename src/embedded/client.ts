/**
 * knex's client for the embedded database: knex-pglite's SQL behaviour, but PGlite is opened
 * only on first use and only under the directory's lock (./lock.ts), and closing knex closes
 * PGlite before it lets the directory go. knex-pglite itself opens PGlite in its constructor,
 * before anyone could take a lock.
 */
import type { PGlite } from '@electric-sql/pglite';
import type { Knex } from 'knex';
import { createRequire } from 'node:module';
import { acquireDirectoryLock, type DirectoryLock } from './lock.js';
import { openEmbedded } from './open.js';

export interface EmbeddedConnection {
  /** The data directory; undefined keeps the database in memory (nothing to lock, nothing kept). */
  readonly dir?: string;
  /** How long the first connection waits for another process's lock. */
  readonly lockTimeoutMs?: number;
  /**
   * A PGlite the caller already opened under the directory's lock (the CLI, which migrates
   * through knex only when the directory needs it): knex uses it and never closes it; the
   * caller closes it, then releases its lock. Typed loosely on purpose: this interface reaches
   * the published declarations, and PGlite's need the DOM and Emscripten types an app may not have.
   */
  readonly open?: object;
}

type OpenPGlite = PGlite & { idleaseLock?: DirectoryLock };

type ClientClass = new (config: Knex.Config) => object;
let embeddedClient: ClientClass | undefined;

/**
 * Built on first use: knex-pglite loads knex, which an app on a pg or mysql2 pool never needs.
 * knex-pglite is typed as knex's generic Client; the hooks below are knex's own internals.
 */
function embeddedClientClass(): ClientClass {
  embeddedClient ??= defineEmbeddedClient(createRequire(import.meta.url)('knex-pglite') as ClientClass);
  return embeddedClient;
}

function defineEmbeddedClient(Base: ClientClass): ClientClass {
  return class EmbeddedClient extends Base {
    declare config: Knex.Config & { connection: EmbeddedConnection };

    _driver(): undefined {
      return undefined;
    }

    async _acquireOnlyConnection(): Promise<OpenPGlite> {
      const { dir, lockTimeoutMs, open } = this.config.connection;
      if (open !== undefined) return open as OpenPGlite;
      if (dir === undefined) return (await openEmbedded(undefined)).db;
      const lock = await acquireDirectoryLock(dir, { timeoutMs: lockTimeoutMs });
      try {
        const db: OpenPGlite = (await openEmbedded(dir)).db;
        db.idleaseLock = lock;
        return db;
      } catch (err) {
        lock?.release();
        throw err;
      }
    }

    async destroyRawConnection(connection: OpenPGlite): Promise<void> {
      if (connection === this.config.connection.open) return;
      try {
        if (!connection.closed) await connection.close();
      } finally {
        connection.idleaseLock?.release();
      }
    }
  };
}

/** The knex config of an embedded database. */
export function embeddedKnexConfig(connection: EmbeddedConnection): Knex.Config {
  return { client: embeddedClientClass() as unknown as typeof Knex.Client, dialect: 'postgres', connection } as unknown as Knex.Config;
}
