/**
 * Fenced code blocks of a Markdown file, with what the docs-sample test needs to run them:
 * the language and markers of the info string (```sql postgres continues) and the line
 * the fence opens on, for failure messages.
 */

export const FLAVORS = ['mysql', 'postgres', 'pglite'] as const;
export type Flavor = (typeof FLAVORS)[number];

/** Languages the harness runs; a block in one of them runs unless it says `no-run`. */
export const RUNNABLE = ['ts', 'typescript', 'sql', 'sh', 'bash', 'shell', 'console'] as const;
/** A plain fence (usage synopses, tables drawn in text) is prose, never run. */
const PROSE = new Set(['', 'text', 'txt']);
const MARKERS = new Set(['no-run', 'continues', 'checkout', 'installed', ...FLAVORS]);

export interface DocBlock {
  readonly file: string;
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly lang: string;
  readonly flavors: readonly Flavor[];
  readonly noRun: boolean;
  readonly continues: boolean;
  /** Runs in this checkout (a shell block for contributors), not in a user's project. */
  readonly checkout: boolean;
  /**
   * Runs in an app that installed the packed tarball (test/package/pack-install.test.ts), not
   * here: what only an installed package has (dist/migrations for the knex CLI).
   */
  readonly installed: boolean;
  readonly code: string;
  /** Why the block is unusable as written (an unknown marker, a config block without no-run). */
  readonly problem?: string;
}

export function isRunnable(lang: string): boolean {
  return (RUNNABLE as readonly string[]).includes(lang);
}

export function extractBlocks(file: string, markdown: string): DocBlock[] {
  const lines = markdown.split('\n');
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, info] = open as unknown as [string, string, string, string];
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length; j++) {
      if (lines[j]!.trim().startsWith(fence) && lines[j]!.trim().replace(/[`~]/g, '') === '') break;
      body.push(lines[j]!.startsWith(indent) ? lines[j]!.slice(indent.length) : lines[j]!);
    }
    const [lang = '', ...markers] = info
      .trim()
      .split(/\s+/)
      .filter((w) => w.length > 0);
    const unknown = markers.filter((m) => !MARKERS.has(m));
    const noRun = markers.includes('no-run');
    const installed = markers.includes('installed');
    let problem: string | undefined;
    if (unknown.length > 0) problem = `unknown marker(s) ${unknown.join(', ')}; known: ${[...MARKERS].join(', ')}`;
    else if (!noRun && !installed && !PROSE.has(lang) && !isRunnable(lang))
      problem = `a \`${lang}\` block is not run: mark it \`${lang} no-run\` (configuration, output) or use a runnable language (${RUNNABLE.join(', ')})`;
    else if (!noRun && lang === 'sql' && !markers.some((m) => (FLAVORS as readonly string[]).includes(m)))
      problem = 'an sql block names the database it is for: ```sql postgres, ```sql mysql or ```sql pglite (several allowed)';
    blocks.push({
      file,
      line: i + 1,
      lang,
      flavors: markers.filter((m): m is Flavor => (FLAVORS as readonly string[]).includes(m)),
      noRun,
      continues: markers.includes('continues'),
      checkout: markers.includes('checkout'),
      installed,
      code: body.join('\n') + '\n',
      ...(problem ? { problem } : {}),
    });
    i = j;
  }
  return blocks;
}
