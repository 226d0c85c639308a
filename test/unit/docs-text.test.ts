/**
 * What the published pages say to a reader: no internal issue numbers (a reader cannot open
 * them; the text must say what was measured and why on its own).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';

const pages = (dir: string): string[] =>
  readdirSync(path.join(REPO_ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? pages(path.join(dir, e.name)) : e.name.endsWith('.md') ? [path.join(dir, e.name)] : [],
  );

it('README.md and docs/ cite no internal issue numbers', () => {
  const cited = ['README.md', ...pages('docs')].flatMap((file) =>
    readFileSync(path.join(REPO_ROOT, file), 'utf8')
      .split('\n')
      .flatMap((line, i) => (/\bissue #?\d+|\(#\d+\)/i.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : [])),
  );
  expect(cited).toEqual([]);
});
