// The floor for `idlease next` on the embedded database (bench/cli.ts): one process that opens a
// PGlite directory, runs one statement that writes (as one lease does) and closes. Plain node,
// no tsx, no idlease code. Usage: node bench/cli-bare-pglite.mjs <dir> [shared_buffers]: the bench
// passes the shared buffers idlease starts PGlite with (src/embedded/open.ts), so that the ratios
// measure idlease's own cost, not the setting.
import { PGlite } from '@electric-sql/pglite';

const [dir, sharedBuffers] = process.argv.slice(2);
if (!dir) throw new Error('usage: node bench/cli-bare-pglite.mjs <dir> [shared_buffers]');
const db = new PGlite(dir, sharedBuffers ? { startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${sharedBuffers}`] } : {});
await db.waitReady;
const res = await db.exec(
  'CREATE TABLE IF NOT EXISTS c (k text PRIMARY KEY, n bigint NOT NULL); ' +
    "INSERT INTO c VALUES ('order', 5) ON CONFLICT (k) DO UPDATE SET n = c.n + 5 RETURNING n::text",
);
process.stdout.write(`${res.at(-1).rows[0].n}\n`);
await db.close();
