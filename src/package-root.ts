import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface PackageRoot {
  /** The directory holding idlease's package.json, as a file: URL ending in `/`. */
  readonly dir: URL;
  readonly version: string;
}

let found: PackageRoot | undefined;

/**
 * idlease's own package directory. Modules run as src/… (tsx, tests) and as dist/src/… (the
 * installed package), at different depths below package.json: walk up to the first package.json,
 * which must be idlease's, so a module never reads another package's files by mistake.
 */
export function packageRoot(): PackageRoot {
  if (found) return found;
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
      if (pkg.name === 'idlease' && typeof pkg.version === 'string') return (found = { dir, version: pkg.version });
      throw new Error(`${fileURLToPath(file)} is not idlease's package.json (name ${JSON.stringify(pkg.name)})`);
    }
    const parent = new URL('..', dir);
    if (parent.href === dir.href) throw new Error(`no package.json above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}
