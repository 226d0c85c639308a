/**
 * Runs every block of one Markdown file as a vitest `describe`, block by block: used by
 * test/docs/pages-*.test.ts for README.md and docs/*.md, and by each test/recipes/ file for
 * its page, so a recipe page is the test of what it shows.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';
import { extractBlocks, FLAVORS, isRunnable, type DocBlock } from './extract.js';
import {
  addExtraDatabases,
  createContext,
  disposeContext,
  runBlock,
  RUN_TIMEOUT_MS,
  type Context,
  type RunResult,
  type Target,
} from './run-block.js';

/** Where a block runs: its markers; else where the block it continues ran; else every database if it names one; else once. */
export function targetsOf(block: DocBlock, previous: readonly Target[]): readonly Target[] {
  if (block.flavors.length > 0) return block.flavors;
  if (block.continues) return previous;
  if (/\b(DATABASE_URL|IDLEASE_URL)\b/.test(block.code)) return FLAVORS;
  return ['none'];
}

export function failure(block: DocBlock, target: Target, r: RunResult): string {
  const tail = (s: string) => s.split('\n').slice(-40).join('\n').trim();
  return (
    `${block.file}:${block.line}: the \`${block.lang}\` block failed on ${target === 'none' ? 'the embedded default' : target}` +
    ` (${r.timedOut ? `timed out after ${RUN_TIMEOUT_MS / 1000} s — does the sample close what it opened?` : `exit ${r.code}`})\n` +
    `--- stderr\n${tail(r.stderr)}\n--- stdout\n${tail(r.stdout)}`
  );
}

/** The Markdown files of a docs folder, sorted. */
export const mdIn = (dir: string): string[] =>
  readdirSync(path.join(REPO_ROOT, dir))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `${dir}/${f}`);

/** README.md and docs/*.md: the pages test/docs runs (the recipe pages run in test/recipes). */
export const DOC_FILES: readonly string[] = ['README.md', ...mdIn('docs')];

/**
 * Share `part` of `parts` of DOC_FILES: the pages by their number of runnable blocks, most first,
 * dealt out in turn. test/docs/pages-<part>.test.ts each run one share, so vitest runs the pages
 * on both workers instead of one file of minutes on one; together the shares are every page.
 */
export const PAGE_SHARES = 3;
export function docShare(part: number, parts: number): string[] {
  return [...DOC_FILES]
    .map((file) => ({ file, blocks: runnableBlocks(file).length }))
    .sort((a, b) => b.blocks - a.blocks || a.file.localeCompare(b.file))
    .filter((_, i) => i % parts === part)
    .map((p) => p.file);
}

export function runnableBlocks(file: string): DocBlock[] {
  return extractBlocks(file, readFileSync(path.join(REPO_ROOT, file), 'utf8')).filter(
    (b) => b.problem !== undefined || (!b.noRun && !b.installed && isRunnable(b.lang)),
  );
}

/**
 * A check around one block on one database: called before the block runs, it answers the
 * check to run after it (or nothing). A recipe test uses it to compare the catalog around a
 * tool's schema sync.
 */
export type AroundBlock = (block: DocBlock, ctx: Context) => Promise<(() => Promise<void>) | undefined>;

export function describeDocFile(file: string, options: { around?: AroundBlock } = {}): void {
  const blocks = runnableBlocks(file);
  // A page of prose only has nothing to run: no suite at all, rather than one reported as skipped.
  if (blocks.length === 0) return;
  describe(file, () => {
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
      it(
        `${file}:${block.line} ${block.lang}${block.flavors.length ? ' ' + block.flavors.join(' ') : ''}${block.continues ? ' continues' : ''}${block.checkout ? ' checkout' : ''}`,
        { timeout: 4 * RUN_TIMEOUT_MS },
        async () => {
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
              const after = await options.around?.(block, ctx);
              const r = await runBlock(block, ctx);
              if (r.code !== 0 || r.timedOut) return failure(block, target, r);
              await after?.();
              return undefined;
            }),
          );
          const failed = failures.filter((f): f is string => f !== undefined);
          if (failed.length > 0) throw new Error(failed.join('\n\n'));
        },
      );
    }
  });
}
