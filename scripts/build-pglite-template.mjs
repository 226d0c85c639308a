// Part of `npm run build`, after tsc: dist/pglite-template.tar.gz, the data directory PGlite's
// initdb makes with idlease's default migrations applied, shipped so that a user's first embedded
// run unpacks it instead of running initdb (~0.9 GB peak RSS and seconds) and the migrator
// (src/embedded/template.ts). Made in a directory of its own, migrated, closed cleanly: it holds
// idlease's tables and knex's bookkeeping, no tag, no ID and no install id (each copy writes its
// own on first open; src/migrations/embedded-template.ts).
import { createTar } from 'nanotar';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { connect } from '../dist/src/index.js';
import { INSTALL_ID_PENDING } from '../dist/src/embedded/template.js';
import { migrateEmbeddedTemplate } from '../dist/src/migrations/embedded-template.js';
import { setFlagsFromString } from 'node:v8';

// One PGlite that runs for seconds: V8's baseline WebAssembly code only, as the CLI's short
// commands do (src/cli/bin.ts), instead of optimizing PGlite function by function on top.
setFlagsFromString('--liftoff-only');

const out = new URL('../dist/pglite-template.tar.gz', import.meta.url);
const scratch = mkdtempSync(path.join(tmpdir(), 'idlease-template-'));
try {
  const dir = path.join(scratch, 'pgdata');
  // PGlite's initdb makes the directory (not an older template), under idlease's lock like any
  // embedded database; destroy() closes PGlite cleanly.
  process.env.IDLEASE_PGLITE_TEMPLATE = 'off';
  const knex = connect(`pglite:${dir}`);
  let applied;
  try {
    applied = await migrateEmbeddedTemplate(knex);
  } finally {
    await knex.destroy();
  }
  // Each copy's first open writes its own install id, then removes this (src/embedded/template.ts).
  writeFileSync(path.join(dir, INSTALL_ID_PENDING), 'the first open of this directory writes its install id\n', { mode: 0o600 });

  // Directories before their files, names sorted, no owner and a fixed mtime: two builds of one
  // PGlite give the same entries.
  const entries = [];
  const walk = (rel) => {
    for (const entry of readdirSync(path.join(dir, rel), { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const child = rel === '' ? entry.name : `${rel}/${entry.name}`;
      const mode = (statSync(path.join(dir, child)).mode & 0o777).toString(8);
      if (entry.isDirectory()) {
        entries.push({ name: `${child}/`, attrs: { mode } });
        walk(child);
      } else if (entry.isFile()) entries.push({ name: child, data: readFileSync(path.join(dir, child)), attrs: { mode } });
      else throw new Error(`unexpected entry in PGlite's data directory: ${child}`);
    }
  };
  walk('');
  writeFileSync(out, gzipSync(createTar(entries, { attrs: { mtime: 0, uid: 0, gid: 0, user: '', group: '' } }), { level: 9 }));
  const entry = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  const { version } = JSON.parse(readFileSync(path.join(path.dirname(entry), '..', 'package.json'), 'utf8'));
  process.stdout.write(
    `dist/pglite-template.tar.gz: the data directory of PGlite ${version}'s initdb, migrated (${applied.join(', ')}), ${entries.length} entries\n`,
  );
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
