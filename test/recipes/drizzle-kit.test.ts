/**
 * drizzle-kit push (the real CLI, 0.31) against a PostgreSQL database where idlease is
 * migrated with its defaults and the app has `orders (id bigint PRIMARY KEY DEFAULT next_id())`:
 * the plan must not touch any idlease object. push prints its plan and then asks for
 * confirmation; with stdin closed the prompt fails ("Interactive prompts require a TTY"), so
 * nothing is ever applied and the printed plan is what is checked. A database with idlease's
 * tables in public (the layout before issue 16) is the control: there push plans to drop them,
 * which shows the check can see such a plan.
 */
import { execFile, spawn } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from '../helpers/db.js';
import { REPO_ROOT } from '../helpers/cli.js';
import { recipeModule } from '../helpers/recipe-tools.js';
import { migrate } from '../../src/migrations/migrate.js';

const DRIZZLE_KIT = path.join(recipeModule('drizzle-kit'), 'bin.cjs');

interface Plan {
  /** The statements push would run: empty when it says "No changes detected". */
  readonly statements: string[];
  readonly output: string;
}

interface PushRun {
  readonly code: number | null;
  readonly output: string;
}

/** `drizzle-kit push` with stdin closed: the plan is printed, the confirmation prompt cannot run. */
function runPush(dialect: 'postgresql' | 'mysql', url: string, schemaFile: string, extra: string[] = []): Promise<PushRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        DRIZZLE_KIT,
        'push',
        '--dialect',
        dialect,
        '--schema',
        `./test/recipes/drizzle/${schemaFile}`,
        '--url',
        url,
        '--verbose',
        '--strict',
        ...extra,
      ],
      { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FORCE_COLOR: '0', NO_COLOR: '1' } },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** The statements of a printed plan; a run that printed none (nor "No changes") fails with its output. */
function planOf(run: PushRun): Plan {
  const { output } = run;
  const none = /No changes detected/.test(output);
  const planned = /You are about to execute/.test(output);
  if (!/Pulling schema from database/.test(output) || (!none && !planned)) {
    throw new Error(
      `drizzle-kit push did not print a plan (exit ${String(run.code)}; is drizzle-kit installed? npm ci --prefix test/recipes). Its output:\n${output}`,
    );
  }
  const statements = none
    ? []
    : output
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => /^(CREATE|ALTER|DROP|COMMENT|TRUNCATE|INSERT|UPDATE|DELETE)\b/i.test(l));
  if (planned && statements.length === 0)
    throw new Error(`drizzle-kit push announced statements but none could be read from its output:\n${output}`);
  return { statements, output };
}

const pushPlan = async (url: string, schemaFile: string): Promise<Plan> => planOf(await runPush('postgresql', url, schemaFile));

async function createOrders(db: TestDb, nextId: string): Promise<void> {
  await db.knex.raw(`CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT ${nextId}, note text NOT NULL)`);
  // The default works and the ID is exact (compared as text, as drizzle's mode: 'bigint' reads it).
  const row = (await db.knex.raw(`INSERT INTO orders (note) VALUES ('x') RETURNING id::text AS id`)).rows[0] as { id: string };
  expect(BigInt(row.id)).toBeGreaterThan(2n ** 53n);
}

describe('drizzle-kit push on a database with idlease (PostgreSQL)', () => {
  let own: TestDb;
  let pub: TestDb;
  let legacy: TestDb;
  beforeAll(async () => {
    [own, pub, legacy] = await Promise.all([
      createTestDb('postgres', 'dk_own'),
      createTestDb('postgres', 'dk_pub'),
      createTestDb('postgres', 'dk_legacy'),
    ]);
    const objects = { segments: true, tickets: true, workers: true } as const;
    await migrate(own.knex, { ...objects, nextId: { schema: 'ids' } });
    await createOrders(own, 'ids.next_id()');
    await migrate(pub.knex, { ...objects, nextId: true });
    await createOrders(pub, 'next_id()');
    await migrate(legacy.knex, { ...objects, nextId: true, schema: 'public' });
    await createOrders(legacy, 'next_id()');
  });
  afterAll(async () => {
    await Promise.all([own?.drop(), pub?.drop(), legacy?.drop()]);
  });

  it('next_id() in a schema of its own: no change at all', { timeout: 30_000 }, async () => {
    const plan = await pushPlan(own.url, 'orders-next-id-schema.ts');
    expect(plan.statements, plan.output).toEqual([]);
  });

  it('next_id() in public, its sequence declared with pgSequence: no change at all', { timeout: 30_000 }, async () => {
    const plan = await pushPlan(pub.url, 'orders-next-id-public.ts');
    expect(plan.statements, plan.output).toEqual([]);
  });

  it('next_id() in public, its sequence not declared: the only change planned is dropping that sequence', { timeout: 30_000 }, async () => {
    // What docs/schema.md tells Drizzle users to avoid; idlease's tables are not in the plan.
    const plan = await pushPlan(pub.url, 'orders-only.ts');
    expect(plan.statements, plan.output).toEqual(['DROP SEQUENCE "public"."idlease_next_id_seq";']);
  });

  it("control: with idlease's tables in public (schema: 'public'), push plans to drop them", { timeout: 30_000 }, async () => {
    const plan = await pushPlan(legacy.url, 'orders-next-id-public.ts');
    const dropped = plan.statements.filter((s) => /^DROP TABLE/i.test(s)).join('\n');
    for (const table of [
      'idlease_migrations',
      'idlease_migrations_lock',
      'idlease_segments',
      'idlease_workers',
      'idlease_ticket_schemes',
    ]) {
      expect(dropped, plan.output).toContain(`"${table}"`);
    }
  });
});

/**
 * MySQL/MariaDB: a schema is a database, so idlease's tables sit beside the app's unless they
 * get a database of their own. What is checked here is what docs/schema.md recommends.
 */
describe('drizzle-kit push on MariaDB', () => {
  let app: TestDb;
  let ids: TestDb;
  let shared: TestDb;
  beforeAll(async () => {
    [app, ids, shared] = await Promise.all([
      createTestDb('mysql', 'dk_app'),
      createTestDb('mysql', 'dk_ids'),
      createTestDb('mysql', 'dk_shared'),
    ]);
    const orders = 'CREATE TABLE orders (id bigint NOT NULL PRIMARY KEY, note text NOT NULL)';
    await app.knex.raw(orders);
    await migrate(ids.knex, { segments: true, tickets: true, workers: true });
    await shared.knex.raw(orders);
    await migrate(shared.knex, { segments: true, tickets: true, workers: true });
  });
  afterAll(async () => {
    await Promise.all([app?.drop(), ids?.drop(), shared?.drop()]);
  });

  it('idlease in a database of its own: the plan for the app database names no idlease object', { timeout: 30_000 }, async () => {
    const plan = planOf(await runPush('mysql', app.url, 'orders-mysql.ts'));
    // drizzle-kit 0.31 misreads MariaDB's primary keys and plans to re-add orders' own; that is
    // its business. None of the statements may touch idlease.
    expect(
      plan.statements.filter((s) => /idlease/i.test(s)),
      plan.output,
    ).toEqual([]);
  });

  it(
    "idlease beside the app's tables: drizzle-kit 0.31 cannot read the database at all (tablesFilter or not)",
    { timeout: 30_000 },
    async () => {
      // Its CHECK-constraint query reads information_schema columns by upper-case name, which
      // MariaDB does not return, and ignores tablesFilter: idlease's CHECKs make it exit 1 with no
      // message. If this starts passing, drizzle-kit was fixed: update docs/schema.md.
      for (const extra of [[], ['--tablesFilter', '!idlease_*']]) {
        const run = await runPush('mysql', shared.url, 'orders-mysql.ts', extra);
        expect(run.code, run.output).toBe(1);
        expect(run.output).not.toMatch(/You are about to execute|No changes detected/);
      }
    },
  );
});

/**
 * The schema files import drizzle-orm, installed in test/recipes/node_modules only, so the root
 * typecheck leaves them to test/recipes/tsconfig.json.
 */
it('the schema files type-check against the installed drizzle-orm (test/recipes/tsconfig.json)', { timeout: 60_000 }, async () => {
  const tsc = path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc');
  const r = await new Promise<{ code: number; output: string }>((resolve) => {
    execFile(process.execPath, [tsc, '-p', 'test/recipes/tsconfig.json'], { cwd: REPO_ROOT }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
    );
  });
  expect(r.code, r.output).toBe(0);
});
