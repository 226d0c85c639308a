// Part of `npm run build`: dist/pglite-template.tar.gz, the data directory PGlite's initdb makes,
// shipped so that a user's first embedded run unpacks it instead of running initdb (~0.9 GB peak
// RSS and seconds; src/embedded/template.ts). Made in a directory of its own, opened once and
// closed cleanly, no statement run on it: it holds no table, no tag, no ID.
import { PGlite } from '@electric-sql/pglite';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as tar from 'tar';

const out = fileURLToPath(new URL('../dist/pglite-template.tar.gz', import.meta.url));
const scratch = mkdtempSync(path.join(tmpdir(), 'idlease-template-'));
try {
  const dir = path.join(scratch, 'pgdata');
  const db = new PGlite(dir);
  await db.waitReady;
  await db.close();
  // portable: no owner, user or host names; mtime fixed so two builds of one PGlite give the same entries.
  await tar.c({ file: out, cwd: dir, gzip: { level: 9 }, portable: true, mtime: new Date(0) }, ['.']);
  const entry = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  const { version } = JSON.parse(readFileSync(path.join(path.dirname(entry), '..', 'package.json'), 'utf8'));
  process.stdout.write(`dist/pglite-template.tar.gz: the data directory of PGlite ${version}'s initdb\n`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
