/**
 * Every code block in README.md and docs/*.md runs as written (markers: CONTRIBUTING.md,
 * "Docs samples"). A block that fails is reported with its file:line.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';
import { extractBlocks, FLAVORS, isRunnable, type DocBlock } from './extract.js';
import { addExtraDatabases, createContext, disposeContext, removeSharedModules, runBlock, RUN_TIMEOUT_MS, typecheckBlocks, type Context, type RunResult, type Target } from './run-block.js';

const docFiles = [
  'README.md',
  ...readdirSync(path.join(REPO_ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`),
];

/** Where a block runs: its markers; else where the block it continues ran; else every database if it names one; else once. */
function targetsOf(block: DocBlock, previous: readonly Target[]): readonly Target[] {
  if (block.flavors.length > 0) return block.flavors;
  if (block.continues) return previous;
  if (/\b(DATABASE_URL|IDLEASE_URL)\b/.test(block.code)) return FLAVORS;
  return ['none'];
}

function failure(block: DocBlock, target: Target, r: RunResult): string {
  const tail = (s: string) => s.split('\n').slice(-40).join('\n').trim();
  return (
    `${block.file}:${block.line}: the \`${block.lang}\` block failed on ${target === 'none' ? 'the embedded default' : target}` +
    ` (${r.timedOut ? `timed out after ${RUN_TIMEOUT_MS / 1000} s — does the sample close what it opened?` : `exit ${r.code}`})\n` +
    `--- stderr\n${tail(r.stderr)}\n--- stdout\n${tail(r.stdout)}`
  );
}

afterAll(() => removeSharedModules());

for (const file of docFiles) {
  const blocks = extractBlocks(file, readFileSync(path.join(REPO_ROOT, file), 'utf8')).filter((b) => b.problem !== undefined || (!b.noRun && isRunnable(b.lang)));
  describe.runIf(blocks.length > 0)(file, () => {
    let live = new Map<Target, Context>();
    const disposeAll = async () => {
      const old = [...live.values()];
      live = new Map();
      await Promise.all(old.map(disposeContext));
    };
    afterAll(disposeAll);

    let previous: readonly Target[] = [];
    for (const block of blocks) {
      const targets = targetsOf(block, previous);
      previous = targets;
      it(`${file}:${block.line} ${block.lang}${block.flavors.length ? ' ' + block.flavors.join(' ') : ''}${block.continues ? ' continues' : ''}${block.checkout ? ' checkout' : ''}`, { timeout: 4 * RUN_TIMEOUT_MS }, async () => {
        if (block.problem) throw new Error(`${file}:${block.line}: ${block.problem}`);
        if (!block.continues) await disposeAll();
        // Each database has its own context, so the runs of one block go side by side.
        const failures = await Promise.all(
          targets.map(async (target) => {
            let ctx = live.get(target);
            if (ctx === undefined) {
              if (block.continues) return `${file}:${block.line}: \`continues\` but the block before it did not run on ${target}`;
              ctx = await createContext(target, block.code);
              live.set(target, ctx);
            } else {
              await addExtraDatabases(ctx, block.code);
            }
            const r = await runBlock(block, ctx);
            return r.code !== 0 || r.timedOut ? failure(block, target, r) : undefined;
          }),
        );
        const failed = failures.filter((f): f is string => f !== undefined);
        if (failed.length > 0) throw new Error(failed.join('\n\n'));
      });
    }
  });
}

describe('TypeScript samples', () => {
  it('type-check under strict NodeNext, as a user would compile them', { timeout: 4 * RUN_TIMEOUT_MS }, async () => {
    const ts = docFiles.flatMap((file) =>
      extractBlocks(file, readFileSync(path.join(REPO_ROOT, file), 'utf8')).filter((b) => !b.noRun && (b.lang === 'ts' || b.lang === 'typescript')),
    );
    const r = await typecheckBlocks(ts);
    // tsc names the generated file README_md_146.ts(3,7): point at the line in the Markdown file instead.
    const located = r.stdout.replace(/^(\w+?)_md_(\d+)\.ts\((\d+),(\d+)\)/gm, (_m, f: string, line: string, l: string, c: string) =>
      `${f.replace(/^docs_/, 'docs/')}.md:${Number(line) + Number(l)}:${c}`);
    expect(r.code, located + r.stderr).toBe(0);
  });
});

describe('docs-sample harness', () => {
  it('flags blocks it cannot run: config without no-run, sql without a database, unknown markers', () => {
    const md = ['```yaml', 'a: 1', '```', '```sql', 'SELECT 1;', '```', '```ts no-rn', 'x', '```', '```yaml no-run', 'a: 1', '```', '```', 'usage', '```'].join('\n');
    const blocks = extractBlocks('x.md', md);
    expect(blocks.map((b) => [b.line, b.problem !== undefined])).toEqual([[1, true], [4, true], [7, true], [10, false], [13, false]]);
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
