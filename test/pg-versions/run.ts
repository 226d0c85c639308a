// `npm run test:pg-versions`: the PostgreSQL suites on every pinned version beside the Debian 15
// the rest of the suite uses (scripts/ensure-pg-versions.mjs installs them). For each version it
// starts a private server from that version's binaries (initdb as postgres, a free port, trust on
// loopback), runs the listed suite files with IDLEASE_TEST_PG_URL pointing at it and
// IDLEASE_TEST_PG_BIN at its binaries (servers a suite starts itself run the same version), stops the
// server whatever happened, and prints a version × suite table. Only the PostgreSQL-flavoured
// describe blocks run (`-t`): the MariaDB and PGlite blocks of the same files do not change with
// the server version, and `npm test` runs them. Exits non-zero when a suite failed, or ran no test.
//
//   npm run test:pg-versions                  every pinned version
//   npm run test:pg-versions -- 14 18         some of them
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { ensurePgVersions, PG_VERSIONS } from '../../scripts/ensure-pg-versions.mjs';
import { startPostgres } from '../helpers/servers.js';

/** The suites, by what they cover: migrations, segments, tickets, next_id() and attach, workers, the failover instance. */
export const SUITES = [
  ['migrations', 'test/integration/migrate.test.ts'],
  ['migrations (down)', 'test/integration/migrate-down-state.test.ts'],
  ['segments', 'test/integration/segment-db.test.ts'],
  ['segments (last IDs)', 'test/integration/segment-last-ids.test.ts'],
  ['segments (programs)', 'test/integration/segment-programs-db.test.ts'],
  ['segments (regression, bump)', 'test/integration/segment-regression.test.ts'],
  ['segments (trigger)', 'test/integration/segment-trigger.test.ts'],
  ['tickets', 'test/integration/ticket-postgres.test.ts'],
  ['tickets (pools)', 'test/integration/ticket-pool.test.ts'],
  ['next_id()', 'test/integration/next-id-postgres.test.ts'],
  ['next_id() attach', 'test/integration/next-id-attach-postgres.test.ts'],
  ['next_id() bump', 'test/integration/next-id-bump.test.ts'],
  ['workers', 'test/integration/workers-db.test.ts'],
  ['failover instance (fence)', 'test/integration/failover-fence.test.ts'],
  ['failover instance (promoted standby)', 'test/ha/hand-row-standby.test.ts'],
  ['failover instance (two promotions)', 'test/ha/pg-two-promotions.test.ts'],
] as const;

/** The PostgreSQL describe blocks: `… on postgres`, `(postgres)`, `… PostgreSQL …` (not PGlite's). */
const POSTGRES_BLOCKS = '[Pp]ostgres|PostgreSQL';

interface VitestJson {
  testResults: Array<{ name: string; status: string; message?: string; assertionResults: Array<{ status: string }> }>;
}

interface Cell {
  passed: number;
  failed: number;
  ok: boolean;
  note?: string;
}

async function runVersion(major: number, bin: string): Promise<{ cells: Map<string, Cell>; seconds: number; server: string }> {
  const started = Date.now();
  process.env.IDLEASE_TEST_PG_BIN = bin;
  const server = await startPostgres({ settings: { max_connections: '300' } });
  const out = mkdtempSync(path.join(tmpdir(), `idlease-pgv-${major}-`));
  const cells = new Map<string, Cell>();
  let version: string;
  try {
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    try {
      version = ((await client.query<{ server_version: string }>('SHOW server_version')).rows[0]?.server_version ?? '?').split(' ')[0]!;
      await client.query('CREATE DATABASE test');
    } finally {
      await client.end();
    }
    const report = path.join(out, 'vitest.json');
    process.stderr.write(`\ntest:pg-versions: PostgreSQL ${version} (${bin}) on port ${server.port}\n`);
    spawnSync(
      process.execPath,
      [
        'node_modules/vitest/vitest.mjs',
        'run',
        ...SUITES.map(([, file]) => file),
        '-t',
        POSTGRES_BLOCKS,
        '--reporter=dot',
        '--reporter=json',
        // Its own report: test-results/vitest.json stays npm test's (scripts/test-summary.mjs reads it).
        `--outputFile.json=${report}`,
      ],
      {
        stdio: 'inherit',
        env: {
          ...process.env,
          IDLEASE_TEST_PG_URL: `postgres://postgres@127.0.0.1:${server.port}/test`,
          IDLEASE_TEST_PG_BIN: bin,
        },
      },
    );
    let json: VitestJson | undefined;
    try {
      json = JSON.parse(readFileSync(report, 'utf8')) as VitestJson;
    } catch {
      /* vitest failed before it wrote a report: every suite below is failed */
    }
    for (const [, file] of SUITES) {
      const result = json?.testResults.find((r) => r.name.endsWith(file));
      const passed = result?.assertionResults.filter((a) => a.status === 'passed').length ?? 0;
      const failed = result?.assertionResults.filter((a) => a.status === 'failed').length ?? 0;
      const note = !result ? 'no report' : result.status !== 'passed' && failed === 0 ? (result.message ?? result.status) : undefined;
      cells.set(file, { passed, failed, ok: !!result && result.status === 'passed' && failed === 0 && passed > 0, note });
    }
  } finally {
    await server.destroy();
    rmSync(out, { recursive: true, force: true });
  }
  return { cells, seconds: Math.round((Date.now() - started) / 1000), server: version };
}

// Ctrl-C: exit through 'exit', where test/helpers/servers.ts kills the server this process started.
process.once('SIGINT', () => process.exit(130));
process.once('SIGTERM', () => process.exit(143));

async function main(): Promise<void> {
  const wanted = process.argv.slice(2).map(Number);
  const majors = wanted.length > 0 ? wanted : Object.keys(PG_VERSIONS).map(Number);
  const bins = ensurePgVersions(majors) as Record<number, string>;
  const started = Date.now();
  const runs: Array<{ major: number; server: string; seconds: number; cells: Map<string, Cell> }> = [];
  for (const major of majors) {
    const versionStarted = Date.now();
    try {
      runs.push({ major, ...(await runVersion(major, bins[major]!)) });
    } catch (e) {
      // A server that did not start fails every suite of its version; the other versions still run.
      const note = `server: ${(e as Error).message}`;
      process.stderr.write(`test:pg-versions: PostgreSQL ${major}: ${note}\n`);
      const cells = new Map(SUITES.map(([, file]) => [file, { passed: 0, failed: 0, ok: false, note }] as const));
      runs.push({ major, server: String(major), seconds: Math.round((Date.now() - versionStarted) / 1000), cells });
    }
  }

  const header = ['suite', ...runs.map((r) => `PostgreSQL ${r.server}`)];
  const rows = SUITES.map(([label, file]) => [
    label,
    ...runs.map((r) => {
      const c = r.cells.get(file)!;
      return c.ok ? `passed (${c.passed})` : `FAILED (${c.failed} of ${c.passed + c.failed}${c.note ? `; ${c.note.split('\n')[0]}` : ''})`;
    }),
  ]);
  rows.push(['seconds', ...runs.map((r) => String(r.seconds))]);
  const widths = header.map((_, i) => Math.max(...[header, ...rows].map((row) => row[i]!.length)));
  const line = (row: string[]) => '| ' + row.map((cell, i) => cell.padEnd(widths[i]!)).join(' | ') + ' |';
  const table = [line(header), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...rows.map(line)].join('\n');
  const failed = runs.some((r) => [...r.cells.values()].some((c) => !c.ok));
  process.stdout.write(
    `\n${table}\n\ntest:pg-versions: ${Math.round((Date.now() - started) / 1000)} s, load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}; ${failed ? 'FAILED' : 'all passed'}\n`,
  );
  process.exit(failed ? 1 : 0);
}

await main();
