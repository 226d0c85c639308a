import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The version in idlease's own package.json, read when asked so the CLI and the package can
 * never disagree. This file runs as src/cli/version.ts (tsx, tests) and as
 * dist/src/cli/version.js (the installed package), two and three levels below package.json:
 * walk up to the first package.json, which must be idlease's.
 */
export function packageVersion(): string {
  for (let dir = new URL('.', import.meta.url); ;) {
    const file = new URL('package.json', dir);
    let text: string | undefined;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (text !== undefined) {
      const pkg = JSON.parse(text) as { name?: unknown; version?: unknown };
      if (pkg.name === 'idlease' && typeof pkg.version === 'string') return pkg.version;
      throw new Error(`${fileURLToPath(file)} is not idlease's package.json (name ${JSON.stringify(pkg.name)}), so the version is unknown`);
    }
    const parent = new URL('..', dir);
    if (parent.href === dir.href) throw new Error(`no package.json above ${fileURLToPath(import.meta.url)}, so the version is unknown`);
    dir = parent;
  }
}
