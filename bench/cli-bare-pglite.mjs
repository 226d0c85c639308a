// The floor for `idlease next` on the embedded database (bench/cli.ts): one process that opens a
// PGlite directory, runs one statement that writes (as one lease does) and closes. Plain node,
// no tsx, no idlease code. Usage: node bench/cli-bare-pglite.mjs <dir>
import { PGlite } from '@electric-sql/pglite';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node bench/cli-bare-pglite.mjs <dir>');
const db = new PGlite(dir);
await db.waitReady;
const res = await db.exec(
  'CREATE TABLE IF NOT EXISTS c (k text PRIMARY KEY, n bigint NOT NULL); ' +
    "INSERT INTO c VALUES ('order', 5) ON CONFLICT (k) DO UPDATE SET n = c.n + 5 RETURNING n::text",
);
process.stdout.write(`${res.at(-1).rows[0].n}\n`);
await db.close();
