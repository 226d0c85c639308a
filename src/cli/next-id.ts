/** `idlease migrate --next-id …` flags and `idlease decode <id>`. */
import { InvalidArgumentError, type Command } from 'commander';
import { IdleaseError } from '../errors.js';
import { decodeId, layoutPreset, LAYOUT_PRESETS, resolveLayout, type LayoutOptions } from '../layout/index.js';
import type { NextIdMigrateOptions } from '../migrations/next-id.js';
import { bumpNextId } from '../next-id/admin.js';
import { attachNextId, detachNextId, nextIdStatus } from '../next-id/attach.js';
import { print, programName, withKnex } from './context.js';
import type { MigrateFlagContributor } from './migrate.js';

function nonNegativeInt(name: string): (value: string) => number {
  return (value: string) => {
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value))) {
      throw new InvalidArgumentError(`${name} must be a non-negative integer, got ${JSON.stringify(value)}.`);
    }
    return Number(value);
  };
}

function addLayoutFlags(cmd: Command): Command {
  return cmd
    .option('--time-bits <n>', 'bits for milliseconds since the epoch (default 41)', nonNegativeInt('--time-bits'))
    .option('--shard-bits <n>', 'bits for the shard id (default 10)', nonNegativeInt('--shard-bits'))
    .option('--sequence-bits <n>', 'bits for the per-millisecond sequence (default 12)', nonNegativeInt('--sequence-bits'))
    .option('--epoch <date>', 'start of the time field: ISO date or Unix ms (default 2024-01-01T00:00:00Z)');
}

/** Layout flags plus what only decoding and snowflakes know: presets, time units, field order. */
export function addDecodeLayoutFlags(cmd: Command): Command {
  return addLayoutFlags(cmd)
    .option('--preset <name>', `a named layout (${Object.keys(LAYOUT_PRESETS).join(', ')}); the flags above override its fields`)
    .option('--time-unit-ms <n>', 'milliseconds per step of the time field (default 1; sonyflake 10)', nonNegativeInt('--time-unit-ms'))
    .option('--order <order>', 'shard-sequence (default) or sequence-shard (sonyflake: machine id last)');
}

/** The layout a decode or snowflake command asked for: a preset, then single fields over it. */
export function decodeLayoutFrom(flags: Record<string, unknown>): LayoutOptions {
  const out: LayoutOptions & { epochMs?: number } = {};
  if (flags.preset !== undefined) Object.assign(out, layoutPreset(flags.preset));
  Object.assign(out, layoutFrom(flags));
  if (flags.epoch !== undefined) delete out.epochMs;
  if (flags.timeUnitMs !== undefined) out.timeUnitMs = flags.timeUnitMs as number;
  if (flags.order !== undefined) out.order = flags.order as LayoutOptions['order'];
  return out;
}

function layoutFrom(flags: Record<string, unknown>): LayoutOptions {
  const out: LayoutOptions = {};
  if (flags.timeBits !== undefined) out.timeBits = flags.timeBits as number;
  if (flags.shardBits !== undefined) out.shardBits = flags.shardBits as number;
  if (flags.sequenceBits !== undefined) out.sequenceBits = flags.sequenceBits as number;
  if (flags.epoch !== undefined) out.epoch = flags.epoch as string;
  return out;
}

/** The migrate flags that only --next-id reads (commander's camelCase keys). */
const NEXT_ID_ONLY = [
  'nextIdSchema',
  'shard',
  'shards',
  'dropDependentDefaults',
  'timeBits',
  'shardBits',
  'sequenceBits',
  'epoch',
] as const;

function flagName(key: string): string {
  return '--' + key.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
}

export const nextIdMigrateFlags: MigrateFlagContributor = {
  configure(cmd) {
    cmd
      .option('--next-id', 'install next_id() (PostgreSQL/PGlite: in --next-id-schema; MariaDB: in the database)')
      .option(
        '--next-id-schema <name>',
        'schema for next_id() and its sequence (default public; with --shards the prefix of <name>_<shard>)',
      )
      .option('--shard <n>', 'logical shard id in every ID (default 0; with --shards the first one)', nonNegativeInt('--shard'))
      .option('--shards <n>', 'install n shards at once, one schema each: <schema>_<shard>', nonNegativeInt('--shards'))
      .option('--drop-dependent-defaults', 'with --down: also drop table DEFAULTs that still call next_id()');
    addLayoutFlags(cmd);
    cmd.addHelpText(
      'after',
      `
  idlease migrate --url postgres://… --no-segments --next-id --next-id-schema insta --shard 5
  idlease migrate --url postgres://… --no-segments --next-id --next-id-schema shard --shards 4   shard_0 … shard_3`,
    );
  },
  toOptions(flags) {
    const named = NEXT_ID_ONLY.find((k) => flags[k] !== undefined);
    if (flags.nextId !== true) {
      // --down names what to remove by these flags alone (docs/next-id.md); installing takes --next-id,
      // so that a stray --shard does not install next_id() in public.
      if (named === undefined) return {};
      if (flags.down !== true)
        throw new IdleaseError('BAD_CONFIG', `${flagName(named)} applies only with --next-id; add --next-id to install next_id().`);
    }
    const opts: NextIdMigrateOptions = { ...layoutFrom(flags) };
    const shardBits = resolveLayout(layoutFrom(flags)).shardBits;
    const first = (flags.shard as number | undefined) ?? 0;
    const last = first + ((flags.shards as number | undefined) ?? 1) - 1;
    if (flags.shards === 0) throw new IdleaseError('BAD_CONFIG', '--shards must be at least 1 (how many shard schemas to install), got 0.');
    if (last >= 2 ** shardBits) {
      const range = `from 0 to ${2 ** shardBits - 1} (--shard-bits ${shardBits})`;
      throw new IdleaseError(
        'BAD_CONFIG',
        flags.shards === undefined
          ? `--shard must be ${range}, got ${first}.`
          : `--shard ${first} --shards ${String(flags.shards)} would install shards up to ${last}; shards run ${range}.`,
      );
    }
    if (flags.nextIdSchema !== undefined) opts.schema = flags.nextIdSchema as string;
    if (flags.shard !== undefined) opts.shard = flags.shard as number;
    if (flags.shards !== undefined) opts.shards = flags.shards as number;
    if (flags.dropDependentDefaults === true) opts.dropDependentDefaults = true;
    return { nextId: opts };
  },
};

export function registerNextIdCommands(program: Command): void {
  const cmd = program
    .command('decode')
    .description('split a next_id() or snowflake ID into time, shard (worker) and sequence (offline: no database)')
    .argument('<id...>', 'one or more IDs (decimal)');
  addDecodeLayoutFlags(cmd).action((ids: string[], flags: Record<string, unknown>, self: Command) => {
    // No clock checks: an old layout must still decode old IDs.
    const layout = resolveLayout(decodeLayoutFrom(flags), null);
    const decoded = ids.map((raw) => {
      if (!/^\d+$/.test(raw)) throw new IdleaseError('BAD_ARGUMENT', `decode: ${JSON.stringify(raw)} is not a decimal ID.`);
      return decodeId(raw, layout);
    });
    print(
      self,
      decoded.map(
        (d) =>
          `${d.id}  time ${Number.isNaN(d.unixMs) ? `+${d.timeMs} ms` : d.timestamp.toISOString()}  shard ${d.shard}  sequence ${d.sequence}`,
      ),
      decoded.length === 1 ? jsonOf(decoded[0]!) : decoded.map(jsonOf),
    );
  });
  cmd.addHelpText(
    'after',
    `
Examples:
  idlease decode 382685760811184128
  idlease decode 382685760811184128 --json
  idlease decode 1541815603606036480 --preset twitter
  idlease decode 410008727573037057 --preset sonyflake
  idlease decode 123456789 --time-bits 41 --shard-bits 13 --sequence-bits 9 --epoch 2011-08-24T21:07:01.721Z`,
  );
}

/** `idlease next-id bump | attach | detach | status`: operate an installed next_id(). */
export function registerNextIdAdminCommands(program: Command): void {
  const group = program.command('next-id').description('operate an installed next_id(): attach, detach, status, bump');
  group
    .command('attach')
    .description(
      "make a table's bigint column take next_id() on insert (PostgreSQL: its DEFAULT; MariaDB: the ID expression as its DEFAULT)",
    )
    .argument('<table>', 'the table (PostgreSQL: schema.table allowed)')
    .option('--column <name>', 'the ID column (default id)')
    .option('--next-id-schema <name>', 'PostgreSQL: schema next_id() was installed in (default public)')
    .option('--replace', "replace a DEFAULT the column already has (a bigserial's nextval(…)); detach puts it back")
    .option(
      '--call',
      'PostgreSQL: write DEFAULT <schema>.next_id() instead of the ID expression (cheaper to plan: for single-row INSERTs sent unprepared)',
    )
    .addHelpText(
      'after',
      `
Examples:
  idlease --url mysql://app@db/app next-id attach orders
  idlease --url postgres://app@db/app next-id attach orders --column order_id --next-id-schema shard_5
  idlease --url postgres://app@db/app next-id attach events --call`,
    )
    .action(async (table: string, flags: { column?: string; nextIdSchema?: string; call?: boolean; replace?: boolean }, self: Command) => {
      await withKnex(self, async (knex) => {
        const r = await attachNextId(knex, {
          table,
          column: flags.column,
          schema: flags.nextIdSchema,
          form: flags.call ? 'call' : 'expression',
          replace: flags.replace === true,
        });
        // The expression is long (the draw, the freshness test, the composition): named, not
        // printed, on the line; --json carries it whole.
        const what = /^CASE |NEXT VALUE/.test(r.expression) ? 'the ID expression (--json shows it)' : r.expression;
        const replaced = r.previous === undefined ? '' : ` (it replaced DEFAULT ${r.previous}, which detach puts back)`;
        print(self, [`${r.table}.${r.column} takes next_id() on insert: its DEFAULT is ${what}${replaced}`], { ...r });
      });
    });
  group
    .command('detach')
    .description("drop next_id() from a column's DEFAULT, putting back the one attach --replace replaced (the column and its data stay)")
    .argument('<table>', 'the table')
    .option('--column <name>', 'the ID column (default id)')
    .option('--next-id-schema <name>', 'PostgreSQL: schema next_id() was installed in (default public)')
    .action(async (table: string, flags: { column?: string; nextIdSchema?: string }, self: Command) => {
      await withKnex(self, async (knex) => {
        const r = await detachNextId(knex, { table, column: flags.column, schema: flags.nextIdSchema });
        const back = r.previous === undefined ? ' (it has no DEFAULT now)' : `: its DEFAULT is ${r.previous} again`;
        print(self, [`${r.table}.${r.column} no longer takes next_id()${back}`], { ...r });
      });
    });
  group
    .command('status')
    .description("the installed layout, shard, attached columns and how far the next ID's time field trails or leads the clock")
    .option('--next-id-schema <name>', 'PostgreSQL: schema next_id() was installed in (default public)')
    .action(async (flags: { nextIdSchema?: string }, self: Command) => {
      await withKnex(self, async (knex) => {
        const s = await nextIdStatus(knex, { schema: flags.nextIdSchema });
        const l = s.layout;
        const lines = [
          `next_id() in ${s.namespace} ${s.schema}: shard ${s.shard}, layout ${l.timeBits}/${l.shardBits}/${l.sequenceBits} bits (time/shard/sequence), epoch ${l.epoch}`,
          `attached: ${s.attached.length === 0 ? 'none' : s.attached.map((a) => `${a.table}.${a.column}`).join(', ')}`,
          s.leadMs > 0
            ? `time field now: ${s.leadMs} ms ahead of the clock (a burst, a bump or a failover's jump; the clock catches up)`
            : `time field now: ${s.lagMs === 0 ? 'on the clock' : `${s.lagMs} ms behind the clock`}`,
        ];
        if (s.homeServerId !== undefined && s.serverId !== undefined) {
          lines.push(
            s.homeServerId === s.serverId
              ? `home: this server (server_id ${s.serverId})`
              : `home: server_id ${s.homeServerId}; this server is ${s.serverId}: inserts into attached columns fail here (idlease_next_id_not_home has run out) until it is home. ` +
                  (s.readOnly
                    ? 'It is read-only: it becomes home when promoted.'
                    : s.tickerRuns
                      ? 'Its ticker runs, so it makes itself home within a second.'
                      : `Its ticker is ${s.ticker} here, so nothing makes it home by itself: ${programName()} next-id attach <table>`),
          );
        }
        print(self, lines, { ...s });
      });
    });
  group
    .command('bump')
    .description('raise the sequence behind next_id() so new IDs start --ahead-ms past the database clock (never lowers)')
    .option('--next-id-schema <name>', 'schema next_id() was installed in (default public)')
    .requiredOption(
      '--ahead-ms <ms>',
      'how far ahead of the clock new IDs start: the largest burst lead you expect',
      nonNegativeInt('--ahead-ms'),
    )
    .addHelpText(
      'after',
      `
After a failover to a standby that may have missed the latest draws, run this before traffic
reaches it; see docs/failover.md.`,
    )
    .action(async (flags: { nextIdSchema?: string; aheadMs: number }, self: Command) => {
      await withKnex(self, async (knex) => {
        const r = await bumpNextId(knex, { schema: flags.nextIdSchema, aheadMs: flags.aheadMs });
        print(self, [`next_id() in ${flags.nextIdSchema ?? 'public'}: sequence ${r.before ?? 'never drawn'} → ${r.after}`], {
          schema: flags.nextIdSchema ?? 'public',
          before: r.before === null ? null : String(r.before),
          after: String(r.after),
        });
      });
    });
}

function jsonOf(d: ReturnType<typeof decodeId>) {
  return {
    id: d.id,
    timestamp: Number.isNaN(d.unixMs) ? null : d.timestamp.toISOString(),
    timeMs: d.timeMs,
    shard: d.shard,
    sequence: d.sequence,
  };
}
