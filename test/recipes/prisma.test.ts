/**
 * docs/recipes/prisma.md, run block by block in one project against PostgreSQL. Its blocks are
 * `no-run` for the docs runner because they need files the page only shows (the schema, the
 * config) and a generated client; this test writes those files from the page, generates, runs
 * the shell and TypeScript blocks as written and type-checks the TypeScript against the
 * generated client.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';
import { extractBlocks, type DocBlock } from '../docs/extract.js';
import { createContext, disposeContext, removeSharedModules, runBlock, typecheckBlocks, type Context } from '../docs/run-block.js';
import { failure } from '../docs/run-file.js';

const PAGE = 'docs/recipes/prisma.md';
const blocks = extractBlocks(PAGE, readFileSync(path.join(REPO_ROOT, PAGE), 'utf8'));
const only = (pick: (b: DocBlock) => boolean, what: string): DocBlock => {
  const found = blocks.filter(pick);
  if (found.length !== 1) throw new Error(`${PAGE}: expected one ${what} block, found ${found.length}`);
  return found[0]!;
};
const schema = only((b) => b.lang === 'prisma', 'prisma schema');
const config = only((b) => b.lang === 'ts' && b.code.includes('defineConfig'), 'prisma.config.ts');
const steps = blocks.filter((b) => (b.lang === 'sh' || b.lang === 'ts') && b !== config);

let ctx: Context;
beforeAll(async () => {
  ctx = await createContext('postgres', '');
  mkdirSync(path.join(ctx.dir, 'prisma'));
  writeFileSync(path.join(ctx.dir, 'prisma/schema.prisma'), schema.code);
  writeFileSync(path.join(ctx.dir, 'prisma.config.ts'), config.code);
  // Only the npm registry is reachable here: the CLI would fetch the schema engine, which
  // `generate` does not use, before generating (the page says so).
  ctx.env.PRISMA_SCHEMA_ENGINE_BINARY = '/bin/false';
  ctx.env.PRISMA_HIDE_UPDATE_MESSAGE = '1';
});
afterAll(async () => {
  if (ctx) await disposeContext(ctx);
  removeSharedModules();
});

describe(PAGE, () => {
  for (const block of steps) {
    it(`${PAGE}:${block.line} ${block.lang}`, { timeout: 120_000 }, async () => {
      const r = await runBlock(block, ctx);
      if (r.code !== 0 || r.timedOut) throw new Error(failure(block, 'postgres', r));
      if (block.code.includes('prisma generate')) expect(r.stdout).toMatch(/Generated Prisma Client \(7\./);
    });
  }

  it('the TypeScript blocks type-check against the generated client', { timeout: 120_000 }, async () => {
    const r = await typecheckBlocks(
      steps.filter((b) => b.lang === 'ts'),
      ctx.dir,
    );
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });
});
