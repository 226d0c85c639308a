/** `idlease snowflake next` and `idlease workers list`: thin flag parsing over src/snowflake. */
import { InvalidArgumentError, type Command } from 'commander';
import { validateIdentifier } from '../identifiers.js';
import { resolveLayout } from '../layout/index.js';
import { createSnowflakeAllocator } from '../snowflake/index.js';
import { createKnexWorkerIdStore } from '../snowflake/worker-store.js';
import { addDecodeLayoutFlags, decodeLayoutFrom } from './next-id.js';
import { print, waitMs, withKnex } from './context.js';

function count(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 1_000_000)
    throw new InvalidArgumentError(`-n must be an integer from 1 to 1000000, got ${JSON.stringify(value)}.`);
  return Number(value);
}

/** A released lease is stored as expiring at the epoch: say "released", not 1970-01-01. */
function leaseText(r: { alive: boolean; leaseExpiresAt: Date }): string {
  if (r.leaseExpiresAt.getTime() < 2 * 86_400_000) return 'released'; // 1970-01-02 on MySQL, the epoch on PostgreSQL
  return `${r.alive ? 'expires' : 'expired'} ${r.leaseExpiresAt.toISOString()}`;
}

/** The recorded time bound (Unix ms) as a date; 0 is "none yet". */
function timeText(ms: bigint): string {
  if (ms <= 0n) return '-';
  const date = new Date(Number(ms));
  return Number.isNaN(date.getTime()) ? `${ms} ms` : date.toISOString();
}

export function registerSnowflakeCommands(program: Command): void {
  const snowflake = program
    .command('snowflake')
    .description('time-ordered IDs made in this process with a worker id leased from idlease_workers');
  const next = snowflake
    .command('next')
    .description('claim a worker id, print IDs, give the id back')
    .option('-n <count>', 'how many IDs', count, 1)
    .option('--group <name>', 'worker-id group', 'default')
    .option(
      '--schema <name>',
      "PostgreSQL schema of idlease's tables (default idlease; public for an install kept where an older idlease put it)",
    );
  addDecodeLayoutFlags(next).action(async (flags: Record<string, unknown>, self: Command) => {
    await withKnex(self, async (knex) => {
      const layout = resolveLayout(decodeLayoutFrom(flags));
      const alloc = createSnowflakeAllocator({
        knex,
        group: flags.group as string,
        layout,
        waitTimeoutMs: waitMs(self),
        ...(flags.schema === undefined ? {} : { schema: flags.schema as string }),
      });
      try {
        const ids = await alloc.nextBatch(flags.n as number);
        print(self, ids.map(String), { group: alloc.group, workerId: alloc.workerId, ids });
      } finally {
        await alloc.close();
      }
    });
  });
  next.addHelpText(
    'after',
    `
Examples:
  idlease snowflake next -n 5 --group orders
  idlease snowflake next --preset twitter`,
  );

  program
    .command('workers')
    .description('worker-id leases of snowflake allocators')
    .command('list')
    .description('every worker id of a group (or all groups): holder, lease expiry, recorded time bound')
    .option('--group <name>', 'only this group')
    .option(
      '--schema <name>',
      "PostgreSQL schema of idlease's tables (default idlease; public for an install kept where an older idlease put it)",
    )
    .action(async (flags: { group?: string; schema?: string }, self: Command) => {
      await withKnex(self, async (knex) => {
        const rows = await createKnexWorkerIdStore(knex, {
          schema: flags.schema === undefined ? undefined : validateIdentifier(flags.schema, '--schema'),
          table: 'idlease_workers',
        }).list(flags.group);
        print(
          self,
          rows.length === 0
            ? 'no worker ids claimed yet'
            : rows.map(
                (r) =>
                  `${r.group}  ${r.workerId}  ${r.alive ? 'alive' : 'free '}  ${r.host}/${r.pid}  ${leaseText(r)}  IDs up to ${timeText(r.maxTimeMs)}`,
              ),
          rows,
        );
      });
    });
}
