/**
 * The shape docs/architecture.md promises, checked on the source itself: knex is touched only
 * by its driver, connect(url), the embedded knex client and the migration code (everything
 * else runs on the SqlExecutor seam), and imports inside src/ form no cycle.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const SRC = path.join(ROOT, 'src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : [],
  );
}

const FILES = sources(SRC).map((abs) => ({ rel: path.relative(ROOT, abs).split(path.sep).join('/'), text: readFileSync(abs, 'utf8') }));

const KNEX_ALLOWED = [/^src\/drivers\/knex\.ts$/, /^src\/connect\.ts$/, /^src\/embedded\/client\.ts$/, /^src\/migrations\//];
// An import or require of knex (types included), or a raw statement or transaction on a knex handle.
const KNEX_USE = /from 'knex(-pglite)?'|import\('knex(-pglite)?'\)|\('knex(-pglite)?'\)|\b(knex|trx)\.(raw|transaction)\(/;

// Which database a handle reaches is the engine's to say (src/dialects/engine.ts, asked of the
// server once per executor); code above src/dialects/ asks the engine's members. The one other
// place a family name may be tested is a driver's hook saying which family its connection speaks.
const FLAVOR_ALLOWED = [/^src\/dialects\//, /^src\/drivers\/knex-family\.ts$/];
const NAMES = '(?:mysql|mariadb|pg|postgres|postgresql|pglite)';
const FLAVOR_CHECK = [
  /\.flavor\b/, // reading an executor's family instead of its engine
  /\bflavor\s*[!=]==?|[!=]==?\s*flavor\b/,
  new RegExp(`[!=]==?\\s*'${NAMES}'|'${NAMES}'\\s*[!=]==?`), // a family name compared
  new RegExp(`\\bcase\\s+'${NAMES}'\\s*:`),
  /\bisPostgres\(/,
];

/** Every line above src/dialects/ that tests a flavor name, as `file:line: text`. */
export function flavorChecks(files: ReadonlyArray<{ rel: string; text: string }>): string[] {
  return files
    .filter((f) => !FLAVOR_ALLOWED.some((re) => re.test(f.rel)))
    .flatMap((f) => f.text.split('\n').map((line, i) => ({ f, line, i })))
    .filter(({ line }) => !/^\s*(\*|\/\/|\/\*)/.test(line) && FLAVOR_CHECK.some((re) => re.test(line)))
    .map(({ f, line, i }) => `${f.rel}:${i + 1}: ${line.trim()}`);
}

describe('source structure', () => {
  it('finds the sources it checks', () => {
    expect(FILES.length).toBeGreaterThan(50);
    expect(
      FILES.some((f) => f.rel === 'src/drivers/knex.ts' && KNEX_USE.test(f.text)),
      'the pattern matches the knex driver itself',
    ).toBe(true);
  });

  it('knex appears only in its driver, connect(), the embedded knex client and the migration code', () => {
    const offenders = FILES.filter((f) => !KNEX_ALLOWED.some((re) => re.test(f.rel)))
      .flatMap((f) => f.text.split('\n').map((line, i) => ({ f, line, i })))
      .filter(({ line }) => KNEX_USE.test(line) && !/^\s*(\*|\/\/)/.test(line))
      .map(({ f, line, i }) => `${f.rel}:${i + 1}: ${line.trim()}`);
    expect(offenders).toEqual([]);
  });

  it('the flavor-check pattern catches each form it forbids', () => {
    const forms = [
      "if (db.flavor === 'mysql') x();",
      "const postgres = flavor !== 'mysql';",
      "return kind === 'pglite' ? a : b;",
      "case 'postgres':",
      'if (isPostgres(f)) x();',
    ];
    expect(forms.filter((line) => flavorChecks([{ rel: 'src/x.ts', text: line }]).length === 1)).toEqual(forms);
    expect(flavorChecks([{ rel: 'src/x.ts', text: "if (engine.namespaces === 'schema') x();" }])).toEqual([]);
  });

  it('no flavor name is tested above src/dialects/ (nor in a driver beyond its family hook)', () => {
    expect(flavorChecks(FILES)).toEqual([]);
  });

  it('imports inside src/ form no cycle', () => {
    const graph = new Map<string, string[]>();
    for (const f of FILES) {
      const deps = [...f.text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map((m) =>
        path.posix.normalize(path.posix.join(path.posix.dirname(f.rel), m[1]!.replace(/\.js$/, '.ts'))),
      );
      graph.set(f.rel, deps);
    }
    const state = new Map<string, 'open' | 'done'>();
    const cycles: string[] = [];
    const visit = (node: string, trail: string[]): void => {
      if (state.get(node) === 'done') return;
      if (state.get(node) === 'open') {
        cycles.push([...trail.slice(trail.indexOf(node)), node].join(' → '));
        return;
      }
      state.set(node, 'open');
      for (const dep of graph.get(node) ?? []) visit(dep, [...trail, node]);
      state.set(node, 'done');
    };
    for (const node of graph.keys()) visit(node, []);
    expect(cycles).toEqual([]);
  });
});
