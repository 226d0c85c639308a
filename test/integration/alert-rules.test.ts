/**
 * The alert rules of docs/serve.md, as written there, run by `promtool test rules`: for each
 * rule one set of series that must fire it and one that must not. The series are written by
 * hand (an alert needs minutes of history), so every one of them is checked against what a
 * real exporter produces — segment, ticket and snowflake allocators on PostgreSQL, one of each
 * failing against a closed port — by name and label names: a rule that joins on labels the
 * metrics do not have (IdleaseRunwayLow's `and` once did) fails here, not in production.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/connect.js';
import { collectMetrics } from '../../src/metrics/index.js';
import { migrate } from '../../src/migrations/migrate.js';
import { addTag, createSegmentAllocator } from '../../src/segment/index.js';
import { createSnowflakeAllocator } from '../../src/snowflake/index.js';
import { createTicketAllocator } from '../../src/ticket/index.js';
import { extractBlocks } from '../docs/extract.js';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { REPO_ROOT } from '../helpers/cli.js';

const run = promisify(execFile);
const DOC = 'docs/serve.md';

/** The yaml block of docs/serve.md that holds the alert rules, verbatim. */
function documentedRules(): string {
  const blocks = extractBlocks(DOC, readFileSync(path.join(REPO_ROOT, DOC), 'utf8')).filter(
    (b) => b.lang === 'yaml' && /^groups:/m.test(b.code),
  );
  expect(blocks.length, `${DOC} has one yaml block of alert rules`).toBe(1);
  return blocks[0]!.code;
}

function alertNames(rules: string): string[] {
  return [...rules.matchAll(/^\s*-\s*alert:\s*(\S+)/gm)].map((m) => m[1]!);
}

interface Series {
  readonly series: string;
  readonly values: string;
}
interface Case {
  /** Series under which the alert must be firing at `at`, with these labels. */
  readonly fires: { readonly input: Series[]; readonly labels: Array<Record<string, string>> };
  /** Series under which it must not be firing (pending is not firing), each at its own time (default `at`). */
  readonly quiet: Array<{ readonly input: Series[]; readonly at?: string }>;
  readonly at: string;
}

const I = { instance: 'app-1:8080', job: 'idlease' };
const sel = (name: string, labels: Record<string, string>) =>
  `${name}{${Object.entries({ ...I, ...labels })
    .map(([k, v]) => `${k}="${v}"`)
    .join(',')}}`;
const errorsFlat = (tag: string, code: string, instance = I.instance): Series => ({
  series: sel('idlease_segment_lease_errors_total', { tag, code, instance }),
  values: '0x20',
});
// A lease failing every few seconds from minute 3: the counter climbs.
const errorsClimbing = (tag: string, code: string, instance = I.instance): Series => ({
  series: sel('idlease_segment_lease_errors_total', { tag, code, instance }),
  values: '0 0 0 20+20x17',
});

/** One entry per documented alert; a rule added to the docs without one fails the test. */
const CASES: Record<string, Case> = {
  IdleaseRunwayLow: {
    at: '10m',
    fires: {
      input: [
        { series: sel('idlease_segment_runway_seconds', { tag: 'order' }), values: '600 600 600 30x17' },
        errorsClimbing('order', 'ECONNREFUSED'),
        errorsFlat('order', 'NOT_MIGRATED'),
      ],
      labels: [{ ...I, tag: 'order' }],
    },
    quiet: [
      {
        input: [
          // Low runway with no lease failing (a burst a lease will cover) ...
          { series: sel('idlease_segment_runway_seconds', { tag: 'order' }), values: '30x20' },
          errorsFlat('order', 'ECONNREFUSED'),
          // ... errors on another tag, and on the same tag in another process whose runway is fine.
          { series: sel('idlease_segment_runway_seconds', { tag: 'user' }), values: '600x20' },
          errorsClimbing('user', 'ECONNREFUSED'),
          { series: sel('idlease_segment_runway_seconds', { tag: 'order', instance: 'app-2:8080' }), values: '600x20' },
          errorsClimbing('order', 'ECONNREFUSED', 'app-2:8080'),
        ],
      },
      // Both true only since this minute: pending for `for`.
      {
        at: '9m',
        input: [
          { series: sel('idlease_segment_runway_seconds', { tag: 'order' }), values: '600x8 30x10' },
          errorsClimbing('order', 'ECONNREFUSED'),
        ],
      },
    ],
  },
  IdleaseLeaseErrors: {
    at: '12m',
    fires: {
      input: [errorsClimbing('order', 'ECONNREFUSED'), errorsFlat('order', '28P01')],
      labels: [{ tag: 'order', code: 'ECONNREFUSED' }],
    },
    quiet: [
      // Errors that stopped (one bad minute) ...
      { input: [{ series: sel('idlease_segment_lease_errors_total', { tag: 'order', code: 'ECONNREFUSED' }), values: '0 0 5 5x20' }] },
      // ... and errors for less than `for`.
      { at: '6m', input: [errorsClimbing('order', 'ECONNREFUSED')] },
    ],
  },
  IdleaseCallsFailing: {
    at: '10m',
    fires: {
      input: [
        { series: sel('idlease_segment_timeouts_total', { tag: 'order' }), values: '0x20' },
        { series: sel('idlease_ticket_timeouts_total', {}), values: '0x20' },
        { series: sel('idlease_snowflake_timeouts_total', { group: 'api' }), values: '0x7 1x12' },
      ],
      labels: [{ ...I, group: 'api' }],
    },
    quiet: [
      {
        input: [
          { series: sel('idlease_segment_timeouts_total', { tag: 'order' }), values: '0 3x19' },
          { series: sel('idlease_ticket_timeouts_total', {}), values: '0x20' },
          { series: sel('idlease_snowflake_timeouts_total', { group: 'api' }), values: '0x20' },
        ],
      },
    ],
  },
  IdleaseRegression: {
    at: '30m',
    fires: {
      input: [{ series: sel('idlease_segment_regressions_total', { tag: 'order' }), values: '0x10 1x30' }],
      labels: [{ ...I, tag: 'order' }],
    },
    quiet: [
      { input: [{ series: sel('idlease_segment_regressions_total', { tag: 'order' }), values: '0x40' }] },
      // One from long ago (repaired): the counter stays at 1 for the process's life.
      { at: '70m', input: [{ series: sel('idlease_segment_regressions_total', { tag: 'order' }), values: '1x80' }] },
    ],
  },
  IdleaseTicketServerDown: {
    at: '10m',
    fires: {
      input: [
        { series: sel('idlease_ticket_server_up', { server: 'server1' }), values: '1x20' },
        { series: sel('idlease_ticket_server_up', { server: 'server2' }), values: '1 1 0x18' },
      ],
      labels: [{ ...I, server: 'server2' }],
    },
    quiet: [
      // Down for three minutes, then back ...
      { input: [{ series: sel('idlease_ticket_server_up', { server: 'server2' }), values: '1 1 1 1 1 0 0 0 1x12' }] },
      // ... and down for three minutes so far: shorter than `for`.
      { at: '8m', input: [{ series: sel('idlease_ticket_server_up', { server: 'server2' }), values: '1x4 0x15' }] },
    ],
  },
  IdleaseSnowflakeNoLease: {
    at: '10m',
    fires: {
      input: [{ series: sel('idlease_snowflake_lease_valid', { group: 'api' }), values: '1x5 0x15' }],
      labels: [{ ...I, group: 'api' }],
    },
    quiet: [
      // A renewal late for a moment, and one late since this minute.
      { input: [{ series: sel('idlease_snowflake_lease_valid', { group: 'api' }), values: '1x8 0 1x10' }] },
      { input: [{ series: sel('idlease_snowflake_lease_valid', { group: 'api' }), values: '1x9 0x10' }] },
    ],
  },
  IdleaseSnowflakeLeaseLost: {
    at: '10m',
    fires: {
      input: [{ series: sel('idlease_snowflake_leases_lost_total', { group: 'api' }), values: '0x6 1x13' }],
      labels: [{ ...I, group: 'api' }],
    },
    quiet: [{ input: [{ series: sel('idlease_snowflake_leases_lost_total', { group: 'api' }), values: '2x20' }] }],
  },
  IdleaseClockBehind: {
    at: '10m',
    fires: {
      input: [{ series: sel('idlease_snowflake_clock_waits_total', { group: 'api' }), values: '0x7 4x12' }],
      labels: [{ ...I, group: 'api' }],
    },
    quiet: [{ input: [{ series: sel('idlease_snowflake_clock_waits_total', { group: 'api' }), values: '4x30' }] }],
  },
};

/** `name{a="x",…} value` lines of a Prometheus exposition: metric name → label-name sets seen. */
function labelSets(exposition: string): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const line of exposition.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$/.exec(line);
    if (!m) continue;
    const names = [...(m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)]
      .map((x) => x[1]!)
      .sort()
      .join(',');
    if (!out.has(m[1]!)) out.set(m[1]!, new Set());
    out.get(m[1]!)!.add(names);
  }
  return out;
}

function parseSelector(s: string): { name: string; labelNames: string } {
  const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$/.exec(s)!;
  const names = [...m[2]!.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)].map((x) => x[1]!).filter((n) => n !== 'instance' && n !== 'job');
  return { name: m[1]!, labelNames: names.sort().join(',') };
}

async function promtool(args: string[], cwd: string): Promise<{ code: number; out: string }> {
  try {
    const r = await run('promtool', args, { cwd, timeout: 60_000 });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stdout?: string; stderr?: string; code?: number | string };
    if (e.code === 'ENOENT')
      throw new Error('promtool is not installed: run `bash scripts/ensure-databases.sh` (or `apt-get install prometheus`).', {
        cause: err,
      });
    return { code: typeof e.code === 'number' ? e.code : 1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

describe('alert rules of docs/serve.md under promtool', () => {
  let db: TestDb;
  let exported: Map<string, Set<string>>;
  let dir: string;
  const rules = documentedRules();

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'idlease-alerts-'));
    // A real exporter: every kind of allocator at work on PostgreSQL, and one of each failing.
    db = await createTestDb('postgres', 'alerts');
    await migrate(db.knex, { tickets: { increment: 2, offset: 1 }, workers: true });
    await addTag(db.knex, { tag: 'order' });
    const dead = connect('postgres://postgres@127.0.0.1:1/test', { poolMax: 1 });
    const registry = new Registry();
    const segment = createSegmentAllocator({ knex: db.knex, tag: 'order' });
    const failing = createSegmentAllocator({ knex: dead, tag: 'order', waitTimeoutMs: 300 });
    const tickets = createTicketAllocator({
      servers: [
        { knex: db.knex, offset: 1 },
        { knex: dead, offset: 2 },
      ],
      increment: 2,
      timeoutMs: 1_000,
    });
    const snowflake = createSnowflakeAllocator({ knex: db.knex, group: 'api' });
    const deadSnowflake = createSnowflakeAllocator({ knex: dead, group: 'api', waitTimeoutMs: 300 });
    collectMetrics(registry, segment, failing, tickets, snowflake, deadSnowflake);
    try {
      await segment.nextBatch(10);
      await expect(failing.next()).rejects.toMatchObject({ code: 'DB_UNAVAILABLE' });
      for (let i = 0; i < 5; i++) await tickets.next();
      await snowflake.next();
      await expect(deadSnowflake.next()).rejects.toMatchObject({ code: 'DB_UNAVAILABLE' });
      exported = labelSets(await registry.metrics());
    } finally {
      await Promise.all([segment.close(), failing.close(), tickets.close(), snowflake.close(), deadSnowflake.close()]);
      await dead.destroy();
    }
  }, 60_000);

  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    await db?.drop();
  });

  it('the rules parse, and every documented alert has a case here', async () => {
    writeFileSync(path.join(dir, 'rules.yml'), rules);
    const check = await promtool(['check', 'rules', 'rules.yml'], dir);
    expect(check.code, check.out).toBe(0);
    expect(alertNames(rules).sort()).toEqual(Object.keys(CASES).sort());
  });

  it('every metric the rules use, and every series the cases feed them, is one a real exporter has, with the same labels', () => {
    for (const name of new Set(rules.match(/\bidlease_[a-z_]+\b/g)))
      expect(exported.has(name), `${name} (used by a rule) is not exported`).toBe(true);
    for (const [alert, c] of Object.entries(CASES)) {
      for (const s of [...c.fires.input, ...c.quiet.flatMap((q) => q.input)]) {
        const { name, labelNames } = parseSelector(s.series);
        expect(exported.get(name) ?? new Set(), `${alert}: ${s.series} — exported label sets of ${name}`).toContain(labelNames);
      }
    }
  });

  it.each(Object.keys(CASES))('%s fires on its series and stays quiet on the others', async (alert) => {
    const c = CASES[alert]!;
    // JSON is YAML: promtool reads it as is.
    const tests = {
      rule_files: ['rules.yml'],
      evaluation_interval: '1m',
      tests: [
        {
          interval: '1m',
          input_series: c.fires.input,
          alert_rule_test: [{ eval_time: c.at, alertname: alert, exp_alerts: c.fires.labels.map((l) => ({ exp_labels: l })) }],
        },
        ...c.quiet.map((q) => ({
          interval: '1m',
          input_series: q.input,
          alert_rule_test: [{ eval_time: q.at ?? c.at, alertname: alert, exp_alerts: [] }],
        })),
      ],
    };
    writeFileSync(path.join(dir, 'rules.yml'), rules);
    writeFileSync(path.join(dir, `${alert}.test.yml`), JSON.stringify(tests, null, 2));
    const r = await promtool(['test', 'rules', `${alert}.test.yml`], dir);
    expect(r.code, r.out).toBe(0);
  });
});
