/**
 * The tools docs/recipes/*.md show (Prisma, TypeORM, Sequelize, Drizzle, Kysely) are installed
 * in test/recipes/node_modules from test/recipes/package.json, not in the root: they are two
 * thirds of what the root `npm ci` used to install, and only the docs and recipe tests use them.
 *
 * As the globalSetup of the `docs` vitest project (test/docs, test/recipes) this runs that
 * install before any of their files starts, when it is missing or does not match
 * test/recipes/package-lock.json, so `npm test` works from a fresh clone after the root
 * `npm ci`. A failed install stops the run with the command to run by hand; no test skips.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './cli.js';

export const RECIPES_DIR = path.join(REPO_ROOT, 'test/recipes');
export const RECIPE_MODULES = path.join(RECIPES_DIR, 'node_modules');
export const RECIPE_INSTALL_COMMAND = 'npm ci --prefix test/recipes --no-audit --no-fund';

interface Lock {
  packages: Record<string, { version?: string; optional?: boolean }>;
}
const readLock = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as Lock;

/**
 * Whether test/recipes/node_modules holds what test/recipes/package-lock.json says, however it
 * was installed: npm's own record of the install (node_modules/.package-lock.json) has every
 * package of the lockfile at the same version, optional ones for other platforms aside.
 */
export function recipeToolsInstalled(): boolean {
  const installed = path.join(RECIPE_MODULES, '.package-lock.json');
  if (!existsSync(installed)) return false;
  const want = readLock(path.join(RECIPES_DIR, 'package-lock.json')).packages;
  const have = readLock(installed).packages;
  for (const [key, entry] of Object.entries(want)) {
    if (key === '') continue;
    const got = have[key];
    if (got ? got.version !== entry.version : !entry.optional) return false;
  }
  return Object.keys(have).every((key) => key in want);
}

/**
 * The tools of test/recipes/package.json: what a user of one of the recipes has installed. Not
 * those it links from the root install (`file:`, pg): the sample projects have them already.
 */
export function recipeTools(): string[] {
  const pkg = JSON.parse(readFileSync(path.join(RECIPES_DIR, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };
  return Object.entries(pkg.devDependencies)
    .filter(([, spec]) => !spec.startsWith('file:'))
    .map(([name]) => name);
}

/** A recipe tool's directory; a missing one is an error that says how to install it. */
export function recipeModule(name: string): string {
  const dir = path.join(RECIPE_MODULES, name);
  if (!existsSync(path.join(dir, 'package.json'))) {
    throw new Error(
      `${path.relative(REPO_ROOT, dir)} is missing: the recipe tools are installed apart from the root; run \`${RECIPE_INSTALL_COMMAND}\``,
    );
  }
  return dir;
}

export default function setup(): void {
  if (recipeToolsInstalled()) return;
  process.stderr.write(`test/recipes/node_modules is missing or out of date: ${RECIPE_INSTALL_COMMAND}\n`);
  // Install scripts stay off (allowScripts in test/recipes/package.json denies them): Prisma's
  // would download engines from binaries.prisma.sh, which prisma.test.ts stubs instead.
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const r = spawnSync(npm, ['ci', '--prefix', RECIPES_DIR, '--no-audit', '--no-fund'], { cwd: REPO_ROOT, stdio: ['ignore', 2, 2] });
  if (r.status !== 0) {
    throw new Error(
      `installing the recipe tools failed (${r.error ? r.error.message : `exit ${String(r.status ?? r.signal)}`}); ` +
        `run \`${RECIPE_INSTALL_COMMAND}\` in the checkout and read its output (it needs the npm registry or an npm cache that has the packages)`,
    );
  }
  if (!recipeToolsInstalled())
    throw new Error(`\`${RECIPE_INSTALL_COMMAND}\` succeeded but test/recipes/node_modules does not match test/recipes/package-lock.json`);
}
