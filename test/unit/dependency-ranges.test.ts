/**
 * Runtime dependencies take caret ranges, so an app's own pg or mysql2 dedupes with idlease's.
 * Each range's floor is the version package-lock.json pins, so `npm ci` and every test in CI run
 * on the lowest versions the ranges allow: a range lowered below the lock would let apps install
 * versions no test has run.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';

const pkg = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
const lock = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string }>;
};

describe('runtime dependency ranges', () => {
  it.each(Object.entries(pkg.dependencies))('%s %s: a caret range whose floor is the locked version', (name, range) => {
    const floor = /^\^(\d+\.\d+\.\d+)$/.exec(range)?.[1];
    expect(floor, `${name}: use a caret range ^x.y.z`).toBeDefined();
    const locked = lock.packages[`node_modules/${name}`]?.version;
    expect(locked, `${name}: CI tests the locked ${locked}, so the range must be ^${locked} in package.json`).toBe(floor);
  });
});
