import { type Command, InvalidArgumentError } from 'commander';
import type { ConnectedKnex } from '../connect.js';
import { IdleaseError } from '../errors.js';
import { knexExecutor } from '../drivers/knex.js';
import { pgliteExecutor } from '../drivers/pglite.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { isMigrated, migrate } from '../migrations/migrate.js';
import { addTag, bumpTag, listTags, setFailoverGap, setStep } from '../segment/admin.js';
import { createSegmentAllocator } from '../segment/allocator.js';
import { MAX_ROW_STEP } from '../dialects/segments.js';
import { resolveSegmentOptions, validateTag, type SegmentAllocatorOptions } from '../segment/options.js';
import { MAX_INT64 } from '../ids.js';
import { sqlSegmentStore, type SegmentStore } from '../segment/store.js';
import { pgliteTarget, serverProtocol } from '../urls.js';
import { describeTarget, embeddedDir, positiveInt, print, targetUrl, waitMs, withKnex, withPGlite } from './context.js';
import { drawThroughServe } from './via-serve.js';

interface TableFlags {
  table: string;
  schema?: string;
}

/** The embedded default (and any pglite: URL) is a private playground: idlease sets it up on first use. */
function isEmbedded(cmd: Command): boolean {
  return pgliteTarget(targetUrl(cmd)) !== undefined;
}

async function prepare(cmd: Command, knex: ConnectedKnex, flags: TableFlags): Promise<void> {
  if (isEmbedded(cmd)) await migrateEmbedded(knexExecutor(knex), async () => knex, flags);
}

/** Migrate an embedded database on use; one SELECT when it is already current, knex's migrator only when it is not. */
async function migrateEmbedded(db: SqlExecutor, knex: () => Promise<ConnectedKnex>, flags: TableFlags): Promise<void> {
  const options = { schema: flags.schema, segments: { table: flags.table } };
  if (!(await isMigrated(db, options))) await migrate(await knex(), options);
}

/**
 * `next -n N` on an embedded directory, in one statement: the lock keeps every other process
 * out, so a lease of exactly N is what the allocator's read, lease and give-back of the unused
 * tail end in (three statements). Undefined — near 2^63−1, or any failure — leaves it to the
 * allocator, which leases afresh and says what went wrong in its own words: at worst a range
 * this attempt leased is skipped, never handed out twice.
 */
async function leaseExactly(
  store: SegmentStore,
  tag: string,
  count: number,
  create: { start?: string; step?: number } | undefined,
): Promise<bigint[] | undefined> {
  const resolved = resolveSegmentOptions({ store, tag, ...(create ? { create } : {}) });
  try {
    let res = await store.lease(resolved.tag, count);
    if (res.kind === 'unknown' && resolved.create) {
      const c = resolved.create;
      await store.create(resolved.tag, c.start - 1n, c.step, c.description);
      res = await store.lease(resolved.tag, count);
    }
    if (res.kind !== 'leased') return undefined;
    const first = res.end - BigInt(count) + 1n;
    return Array.from({ length: count }, (_, i) => first + BigInt(i));
  } catch {
    return undefined;
  }
}

/** A positive whole number that may pass 2^53 (an ID), kept as its decimal string. */
function idArg(name: string, what: string): (value: string) => string {
  return (value: string) => {
    if (!/^\d+$/.test(value) || BigInt(value) < 1n || BigInt(value) > MAX_INT64)
      throw new InvalidArgumentError(`${name} must be a positive integer up to 2^63-1 (${what}), got ${JSON.stringify(value)}.`);
    return value;
  };
}

const startArg = idArg('--start', 'the first ID');

/** --step: 0 and a step past the row's limit are the same mistake, refused the same way (BAD_ARGUMENT). */
function stepArg(value: string): number {
  const step = positiveInt('--step')(value);
  if (step > MAX_ROW_STEP) throw new InvalidArgumentError(`--step must be at most ${MAX_ROW_STEP} IDs per lease, got ${value}.`);
  return step;
}

function withTableFlags(cmd: Command): Command {
  return cmd
    .option('--table <name>', 'segment table', 'idlease_segments')
    .option(
      '--schema <name>',
      "PostgreSQL schema of idlease's tables (default idlease; public for an install kept where an older idlease put it)",
    )
    .hook('preAction', refuseSchemaOnMysql);
}

/**
 * --schema on MySQL/MariaDB is refused here as `migrate` refuses it: ignored, it sent the user
 * to a `migrate` that had nothing to do, and back.
 */
function refuseSchemaOnMysql(self: Command): void {
  const { schema } = self.opts<{ schema?: string }>();
  if (schema === undefined || serverProtocol(targetUrl(self))?.schemas !== false) return;
  throw new IdleaseError(
    'BAD_CONFIG',
    `--schema applies to PostgreSQL only; on MySQL/MariaDB idlease's tables are in the database the URL names: leave --schema ${schema} out.`,
  );
}

export function registerSegmentCommands(program: Command): void {
  withTableFlags(
    program
      .command('next <tag>')
      .description('print IDs for a segment tag (one per line; --json: {"tag","ids":[strings]})')
      .option('-n, --count <n>', 'how many IDs (at most 1000000)', positiveInt('-n'), 1)
      .option('--create', 'add the tag if it is missing (automatic on the embedded database)')
      .option('--start <n>', 'first ID when --create adds the tag', startArg)
      .option('--step <n>', 'admin step when --create adds the tag', stepArg),
  )
    .addHelpText(
      'after',
      `
On the embedded database (no --url) the first run creates ./.idlease/, migrates and adds the
tag; later runs continue where the last one stopped (the unused part of each lease is given
back on exit), and never repeat an ID. On a server database run \`idlease migrate\` and
\`idlease tag add <tag>\` first, or pass --create.`,
    )
    .action(async (tag: string, flags: TableFlags & { count: number; create?: boolean; start?: string; step?: number }, self: Command) => {
      validateTag(tag); // before a database is opened: a tag no engine would take is refused alike
      if (flags.count > 1_000_000)
        throw new IdleaseError('BAD_ARGUMENT', `-n must be at most 1000000, got ${flags.count}; run the command again for more.`);
      const create = flags.create || isEmbedded(self) ? { start: flags.start, step: flags.step } : undefined;
      if (create === undefined && (flags.start !== undefined || flags.step !== undefined)) {
        throw new IdleaseError(
          'BAD_ARGUMENT',
          `${flags.start !== undefined ? '--start' : '--step'} applies only when the tag is added here: add --create (or set it with tag add / tag set-step).`,
        );
      }
      const draw = async (source: Pick<SegmentAllocatorOptions, 'knex' | 'store'>) => {
        const alloc = createSegmentAllocator({
          ...source,
          tag,
          table: flags.table,
          schema: flags.schema,
          ...(create ? { create } : {}),
          // One short-lived process: lease what is asked for (at least the row's step), nothing more.
          targetLeaseMs: 1,
          preloadMs: 0,
          waitTimeoutMs: waitMs(self),
        });
        try {
          return await alloc.nextBatch(flags.count);
        } finally {
          await alloc.close();
        }
      };
      const viaServe = (serve: Parameters<typeof drawThroughServe>[0]) =>
        drawThroughServe(serve, {
          tag,
          count: flags.count,
          table: flags.table,
          schema: flags.schema,
          waitMs: waitMs(self),
          ...(create ? { create } : {}),
        });
      const dir = embeddedDir(self);
      // The embedded directory runs on PGlite alone: knex is loaded only if it must be migrated.
      const ids =
        dir !== undefined
          ? await withPGlite(
              self,
              dir,
              async (session) => {
                const db = pgliteExecutor(session.db);
                await migrateEmbedded(db, session.knex, flags);
                const store = sqlSegmentStore(db, { table: flags.table, schema: flags.schema });
                return (await leaseExactly(store, tag, flags.count, create)) ?? draw({ store });
              },
              { viaServe },
            )
          : await withKnex(
              self,
              async (knex) => {
                await prepare(self, knex, flags);
                return draw({ knex });
              },
              { viaServe },
            );
      print(self, ids.map(String), { tag, ids });
      // The tag's last batch: what was left is printed (nothing burned), and the run says why it is short.
      if (ids.length < flags.count)
        throw new IdleaseError(
          'EXHAUSTED',
          `Tag ${JSON.stringify(tag)} had ${ids.length} of the ${flags.count} IDs asked for left below 2^63−1: those are printed, the last it will issue; IDs never wrap. Use a new tag.`,
        );
    });

  const tagCmd = program.command('tag').description('manage segment tags: add | list | set-step | set-failover-gap | bump');

  withTableFlags(
    tagCmd
      .command('add <tag>')
      .description('add a segment tag (does nothing if it exists)')
      .option('--start <n>', 'first ID to hand out', startArg, '1')
      .option('--step <n>', 'admin step: the baseline lease size', stepArg, 1000)
      .option('--description <text>', 'free text', '')
      .option('--failover-gap <n>', 'how far the first lease on a new database instance (a promoted standby) jumps (default 10000000000)'),
  ).action(
    async (tag: string, flags: TableFlags & { start: string; step: number; description: string; failoverGap?: string }, self: Command) => {
      await withKnex(self, async (knex) => {
        await prepare(self, knex, flags);
        const { created, row } = await addTag(knex, {
          tag,
          start: flags.start,
          step: flags.step,
          description: flags.description,
          ...(flags.failoverGap === undefined ? {} : { failoverGap: flags.failoverGap }),
          table: flags.table,
          schema: flags.schema,
        });
        print(
          self,
          created
            ? `added tag ${tag} on ${describeTarget(self)}: first ID ${row.maxId + 1n}, step ${row.step}`
            : `tag ${tag} already exists (max_id ${row.maxId}, step ${row.step}); nothing changed`,
          { created, tag: row.tag, maxId: row.maxId, step: row.step, description: row.description, failoverGap: row.failoverGap },
        );
      });
    },
  );

  withTableFlags(tagCmd.command('list').description('list segment tags')).action(async (flags: TableFlags, self: Command) => {
    await withKnex(self, async (knex) => {
      await prepare(self, knex, flags);
      const rows = await listTags(knex, { table: flags.table, schema: flags.schema });
      const human =
        rows.length === 0
          ? ['no tags yet; add one: idlease tag add <tag>']
          : [
              ['tag', 'max_id', 'step', 'updated_at', 'instance', 'failover_gap', 'jumps', 'last_jump', 'description'].join('\t'),
              ...rows.map((r) =>
                [
                  r.tag,
                  r.maxId,
                  r.step,
                  r.updatedAt.toISOString(),
                  r.instance ?? '-',
                  r.failoverGap,
                  r.jumps,
                  r.jumpedAt?.toISOString() ?? '-',
                  r.description,
                ].join('\t'),
              ),
            ];
      print(self, human, rows);
    });
  });

  withTableFlags(
    tagCmd.command('set-step <tag> <n>').description("change a tag's admin step; running allocators use it from their next lease"),
  ).action(async (tag: string, n: string, flags: TableFlags, self: Command) => {
    const step = positiveInt('step')(n);
    if (step > MAX_ROW_STEP) throw new IdleaseError('BAD_ARGUMENT', `the step must be at most ${MAX_ROW_STEP} IDs per lease, got ${n}.`);
    await withKnex(self, async (knex) => {
      await prepare(self, knex, flags);
      const row = await setStep(knex, tag, step, { table: flags.table, schema: flags.schema });
      print(self, `tag ${tag}: step is now ${row.step} (running allocators use it from their next lease)`, {
        tag,
        step: row.step,
        maxId: row.maxId,
      });
    });
  });

  withTableFlags(
    tagCmd
      .command('set-failover-gap <tag> <n>')
      .description('change how far the first lease on a new database instance (a promoted standby) jumps; docs/failover.md'),
  ).action(async (tag: string, n: string, flags: TableFlags, self: Command) => {
    await withKnex(self, async (knex) => {
      await prepare(self, knex, flags);
      const row = await setFailoverGap(knex, tag, n, { table: flags.table, schema: flags.schema });
      print(self, `tag ${tag}: failover gap is now ${row.failoverGap} (the next failover jumps by it)`, {
        tag,
        failoverGap: row.failoverGap,
        maxId: row.maxId,
      });
    });
  });

  withTableFlags(
    tagCmd
      .command('bump [tag]')
      .description("raise tags' max_id after a failover or restore, so no leased range is leased again")
      .option('--all', 'every tag')
      .option('--by <n>', 'raise by n IDs (the largest step in use × the number of processes)', idArg('--by', 'how many IDs to raise by'))
      .option('--to <id>', 'raise to at least this value (never lowers)', idArg('--to', 'the lowest max_id wanted')),
  )
    .addHelpText(
      'after',
      `
After a failover to a replica that may have missed the latest leases (asynchronous
replication) or a restore from a backup, run this before starting new processes; see
docs/failover.md for the margin to use.`,
    )
    .action(async (tag: string | undefined, flags: TableFlags & { all?: boolean; by?: string; to?: string }, self: Command) => {
      // Checked here in the command's words; bumpTag() says the same in its options' words.
      if ((tag === undefined) === (flags.all !== true)) {
        const how = 'give a tag or --all (one of them)';
        throw new IdleaseError('BAD_ARGUMENT', `tag bump: ${how}.`, {
          cli: { message: `${how}: \`{idlease} tag bump order --by 100000\` or \`{idlease} tag bump --all --by 100000\`.` },
        });
      }
      if ((flags.by === undefined) === (flags.to === undefined))
        throw new InvalidArgumentError('give one of --by <n> (raise by n IDs) or --to <id> (raise to at least id).');
      await withKnex(self, async (knex) => {
        await prepare(self, knex, flags);
        const rows = await bumpTag(knex, { tag, all: flags.all, by: flags.by, to: flags.to, table: flags.table, schema: flags.schema });
        print(
          self,
          rows.map((r) =>
            r.after !== r.before
              ? `tag ${r.tag}: max_id ${r.before} → ${r.after}`
              : `tag ${r.tag}: max_id ${r.before}, unchanged: already at or above ${flags.to ?? 'the value asked for'} (bump never lowers a tag)`,
          ),
          rows,
        );
      });
    });
}
