/**
 * Every code block in README.md and docs/*.md runs as written (markers: README, "Docs
 * samples"), in test/docs/pages-<n>.test.ts, a share of the pages each (docShare). A block that
 * fails is reported with its file:line. The recipe pages (docs/recipes/*.md) run in
 * test/recipes/, one test file per page beside the checks a page cannot show; they are
 * type-checked here with the rest. Here: the type-check, a sample run twice, and the harness.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';
import { extractBlocks } from './extract.js';
import { createContext, disposeContext, removeSharedModules, runBlock, typecheckBlocks, RUN_TIMEOUT_MS } from './run-block.js';
import { DOC_FILES, docShare, failure, mdIn, PAGE_SHARES } from './run-file.js';

const docFiles = DOC_FILES;
const recipeFiles = mdIn('docs/recipes');

afterAll(() => removeSharedModules());

describe('TypeScript samples', () => {
  it('type-check under strict NodeNext, as a user would compile them', { timeout: 4 * RUN_TIMEOUT_MS }, async () => {
    const ts = [...docFiles, ...recipeFiles].flatMap((file) =>
      extractBlocks(file, readFileSync(path.join(REPO_ROOT, file), 'utf8')).filter(
        (b) => !b.noRun && !b.installed && (b.lang === 'ts' || b.lang === 'typescript'),
      ),
    );
    const r = await typecheckBlocks(ts);
    // tsc names the generated file docs_recipes_pg_md_146.ts(3,7): point at the line in the Markdown file instead.
    const byName = new Map(ts.map((b) => [b.file.replace(/[^a-z0-9]+/gi, '_'), b.file]));
    const located = r.stdout.replace(/^(\w+?)_(\d+)\.ts\((\d+),(\d+)\)/gm, (m, f: string, line: string, l: string, c: string) =>
      byName.has(f) ? `${byName.get(f)}:${Number(line) + Number(l)}:${c}` : m,
    );
    expect(r.code, located + r.stderr).toBe(0);
  });
});

describe('README samples run again', () => {
  // A user runs a sample, then runs it again on the same databases: the ticket walkthrough grows
  // its servers 2 → 3, so a second run's migrate with increment 2 met the reshard (refused).
  it('the ticket walkthrough runs twice in a row on the same servers and prints the same', { timeout: 4 * RUN_TIMEOUT_MS }, async () => {
    const blocks = extractBlocks('README.md', readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8'));
    const block = blocks.find((b) => b.lang === 'ts' && b.code.includes('reshardTickets({'));
    if (block === undefined) throw new Error('README.md has no ts block calling reshardTickets({ … })');
    const ctx = await createContext('none', block.code);
    try {
      const first = await runBlock(block, ctx);
      expect(first.code, failure(block, 'none', first)).toBe(0);
      const second = await runBlock(block, ctx);
      expect(second.code, failure(block, 'none', second)).toBe(0);
      expect(second.stdout).toBe(first.stdout);
    } finally {
      await disposeContext(ctx);
    }
  });
});

describe('docs-sample harness', () => {
  it('the pages-<n>.test.ts shares run every page once', () => {
    const shares = Array.from({ length: PAGE_SHARES }, (_, i) => docShare(i, PAGE_SHARES));
    expect(shares.flat().sort()).toEqual([...docFiles].sort());
    for (let i = 0; i < PAGE_SHARES; i++) {
      const test = readFileSync(path.join(REPO_ROOT, `test/docs/pages-${i}.test.ts`), 'utf8');
      expect(test, `test/docs/pages-${i}.test.ts runs docShare(${i}, PAGE_SHARES)`).toContain(`docShare(${i}, PAGE_SHARES)`);
    }
  });

  it('every recipe page has a test in test/recipes/ that runs it', () => {
    const unrun = recipeFiles.filter((file) => {
      const test = path.join(REPO_ROOT, 'test/recipes', `${path.basename(file, '.md')}.test.ts`);
      return !existsSync(test) || !readFileSync(test, 'utf8').includes(`'${file}'`);
    });
    expect(
      unrun,
      'each docs/recipes/<page>.md needs test/recipes/<page>.test.ts that runs it (describeDocFile, or block by block as prisma.test.ts)',
    ).toEqual([]);
  });

  it('flags blocks it cannot run: config without no-run, sql without a database, unknown markers', () => {
    const md = [
      '```yaml',
      'a: 1',
      '```',
      '```sql',
      'SELECT 1;',
      '```',
      '```ts no-rn',
      'x',
      '```',
      '```yaml no-run',
      'a: 1',
      '```',
      '```',
      'usage',
      '```',
    ].join('\n');
    const blocks = extractBlocks('x.md', md);
    expect(blocks.map((b) => [b.line, b.problem !== undefined])).toEqual([
      [1, true],
      [4, true],
      [7, true],
      [10, false],
      [13, false],
    ]);
  });

  it('reports a failing block with its file:line', async () => {
    const [block] = extractBlocks('docs/x.md', '\n\n```sh\nfalse\n```\n');
    const ctx = await createContext('none', block!.code);
    try {
      const r = await runBlock(block!, ctx);
      expect(r.code).not.toBe(0);
      expect(failure(block!, 'none', r)).toMatch(/^docs\/x\.md:3: the `sh` block failed/);
    } finally {
      await disposeContext(ctx);
    }
  });
});
