/**
 * `idlease tickets next|status|reshard` and the `--tickets…` flags of `idlease migrate`.
 * Several servers are named with `--server <url>` repeated, in offset order (1, 2, …),
 * or with explicit `--offsets`; without `--server` the global `--url` is the one server.
 */
import { InvalidArgumentError, type Command } from 'commander';
import type { ConnectedKnex as Knex } from '../connect.js';
import { redact } from '../connect.js';
import { IdleaseError, isIdleaseError } from '../errors.js';
import { createTicketAllocator } from '../ticket/allocator.js';
import { readTicketSchemes, reshardTickets } from '../ticket/reshard.js';
import { schemeDisagreement } from '../ticket/scheme-set.js';
import type { MigrateFlagContributor } from './migrate.js';
import { DEFAULT_PGLITE_DIR } from '../urls.js';
import { shellWord } from '../shell.js';
import { globals, openDatabase, positiveInt, print, programName, refuseBadConnection, resolveUrl, targetUrl, waitMs } from './context.js';

export const ticketMigrateFlags: MigrateFlagContributor = {
  configure(cmd) {
    cmd
      .option('--tickets [sequences...]', 'install ticket tables (MySQL) / sequences (Postgres); names default to "default"')
      .option(
        '--tickets-engine <engine>',
        'MySQL/MariaDB only: storage engine for ticket tables, InnoDB (durable, the default) or MyISAM (faster, not crash-safe)',
      )
      .option(
        '--tickets-increment <n>',
        'auto-increment increment this server serves (number of servers)',
        positiveInt('--tickets-increment'),
      )
      .option('--tickets-offset <k>', "this server's offset 1..increment", positiveInt('--tickets-offset'))
      .option(
        '--tickets-failover-gap <n>',
        'how far the first draw on a new database instance (a promoted replica) moves the counter (default 10000000000)',
      );
  },
  toOptions(flags) {
    const t = flags.tickets as true | string[] | undefined;
    if (t === undefined) {
      const stray = (['ticketsEngine', 'ticketsIncrement', 'ticketsOffset', 'ticketsFailoverGap'] as const).find(
        (k) => flags[k] !== undefined,
      );
      if (stray) {
        const flag = '--' + stray.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
        throw new IdleaseError(
          'BAD_CONFIG',
          `${flag} applies only with --tickets; add --tickets [sequences...] to install ticket objects.`,
        );
      }
      return {};
    }
    const engine = flags.ticketsEngine as string | undefined;
    if (engine !== undefined && engine !== 'InnoDB' && engine !== 'MyISAM') {
      throw new IdleaseError('BAD_CONFIG', `--tickets-engine must be InnoDB or MyISAM, got ${JSON.stringify(engine)}.`);
    }
    return {
      tickets: {
        ...(Array.isArray(t) && t.length > 0 ? { sequences: t } : {}),
        ...(engine !== undefined ? { engine } : {}),
        ...(flags.ticketsIncrement !== undefined ? { increment: flags.ticketsIncrement as number } : {}),
        ...(flags.ticketsOffset !== undefined ? { offset: flags.ticketsOffset as number } : {}),
        ...(flags.ticketsFailoverGap !== undefined ? { failoverGap: flags.ticketsFailoverGap as string } : {}),
      },
    };
  },
};

interface ServerFlags {
  server: string[];
  offsets?: number[];
  increment?: number;
  sequence: string;
}

const collect = (value: string, previous: string[]) => [...previous, value];

function offsetList(value: string): number[] {
  const parts = value.split(',').map((p) => p.trim());
  if (parts.some((p) => !/^\d+$/.test(p)))
    throw new InvalidArgumentError(`expected a comma-separated list of positive integers, got ${JSON.stringify(value)}.`);
  return parts.map(Number);
}

function serverOptions(cmd: Command): Command {
  return cmd
    .option(
      '--server <url>',
      'a ticket server (repeat, in offset order); default: $IDLEASE_TICKET_SERVERS (whitespace-separated), else the global --url',
      collect,
      [] as string[],
    )
    .option('--offsets <list>', 'offsets of the --server URLs, e.g. 1,2,3 (default: 1..N in order)', offsetList)
    .option('--increment <n>', 'auto-increment increment (default: the number of servers)', positiveInt('--increment'))
    .option('--sequence <name>', 'ticket sequence name', 'default');
}

async function withServers<T>(
  self: Command,
  flags: ServerFlags,
  fn: (servers: Array<{ knex: Knex; offset: number; name: string }>) => Promise<T>,
): Promise<T> {
  // $IDLEASE_TICKET_SERVERS (whitespace-separated URLs) keeps passwords out of the process list.
  const fromEnv = (process.env.IDLEASE_TICKET_SERVERS ?? '').split(/\s+/).filter((u) => u.length > 0);
  const urls = flags.server.length > 0 ? flags.server : fromEnv.length > 0 ? fromEnv : [targetUrl(self)];
  if (self.name() === 'reshard' && urls[0] === undefined) {
    // Resharding the embedded default would make ./.idlease/ and move nothing anyone draws from.
    throw new IdleaseError(
      'BAD_ARGUMENT',
      'tickets reshard needs the ticket servers: --server <url> once per server, in offset order (or $IDLEASE_TICKET_SERVERS).',
      {
        cli: {
          message:
            'tickets reshard needs the ticket servers: `{idlease} tickets reshard --server mysql://root@db1/app --server mysql://root@db2/app`, once per server in offset order (or set $IDLEASE_TICKET_SERVERS).',
        },
      },
    );
  }
  const offsets = flags.offsets ?? urls.map((_, i) => i + 1);
  if (offsets.length !== urls.length) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `--offsets names ${offsets.length} offsets for ${urls.length} servers; give one offset per --server.`,
    );
  }
  const knexes = await Promise.all(urls.map((u) => openDatabase(self, u, 2)));
  try {
    return await withReshardHint(self, flags, urls, knexes, () => withOpened());
  } finally {
    await Promise.all(knexes.map((k) => k.destroy()));
  }

  async function withOpened(): Promise<T> {
    // A server that is down is the allocator's business (failover); a wrong password is not.
    await Promise.all(knexes.map((k, i) => refuseBadConnection(k, urls[i], 0, false)));
    return await fn(
      knexes.map((knex, i) => ({ knex, offset: offsets[i]!, name: urls[i] ? redact(urls[i]!) : `pglite:${DEFAULT_PGLITE_DIR}` })),
    );
  }
}

/**
 * A server whose ticket scheme disagrees with the command's flags. The hint never offers a
 * reshard of the servers this command was given: they may be only part of a set, and a reshard
 * that leaves a server of its scheme out repeats IDs (issue 42). When the servers agree on one
 * scheme it offers this command again with that scheme's --increment and --offsets (a change of
 * flags, nothing on the servers); moving the set is a reshard naming every server, said in words.
 */
async function withReshardHint<T>(
  self: Command,
  flags: ServerFlags,
  urls: Array<string | undefined>,
  knexes: readonly Knex[],
  run: () => Promise<T>,
): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (!(err instanceof IdleaseError) || err.cli !== undefined || !/idlease tickets reshard/.test(err.message)) throw err;
    const schemes = await readTicketSchemes(
      knexes.map((knex) => ({ knex })),
      { sequence: flags.sequence },
    );
    const known = schemes.every((s) => s !== undefined) ? schemes : undefined;
    const one =
      known !== undefined &&
      schemeDisagreement(known.map((s, i) => ({ name: String(i), increment: s.increment, offset: s.offset }))) === undefined;
    // --server flags are repeated as given (passwords redacted); otherwise the servers are the
    // --url or the environment's, which `{idlease}` carries as for any other hint.
    const where = flags.server.length > 0 ? urls.map((u) => ` --server ${shellWord(redact(u!))}`).join('') : '';
    const prefix = flags.server.length > 0 ? programName() : '{idlease}';
    const sequence = flags.sequence !== 'default' ? ` --sequence ${shellWord(flags.sequence)}` : '';
    const fix = one
      ? `Give the servers' own scheme: \`${prefix} tickets ${self.name()}${where} --increment ${known[0]!.increment} --offsets ${known.map((s) => s.offset).join(',')}${sequence}\`${flags.server.length === 0 && process.env.IDLEASE_TICKET_SERVERS ? ' (servers from $IDLEASE_TICKET_SERVERS)' : ''}. `
      : 'Give --increment and --offsets as `tickets status` shows them for each server. ';
    const message = err.message.replace(
      /Fix the options, or move the whole set .*$/,
      `${fix}To move the set to a new scheme run \`tickets reshard\` naming every server ${one ? `that serves increment ${known[0]!.increment}` : 'of the set'}, not only these: a reshard that leaves one out is refused (docs/tickets.md).`,
    );
    throw new IdleaseError(err.code, err.message, { cause: err, cli: { message } });
  }
}

function nonNegativeBig(value: string): bigint {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError(`--margin must be a non-negative integer, got ${JSON.stringify(value)}.`);
  return BigInt(value);
}

/** `tickets next -n` at most: each ticket is one statement on a server. */
const MAX_TICKETS_PER_CALL = 10_000;

function ticketCount(value: string): number {
  const n = positiveInt('--count')(value);
  if (n > MAX_TICKETS_PER_CALL)
    throw new InvalidArgumentError(`--count draws at most ${MAX_TICKETS_PER_CALL} tickets per call (each is a statement), got ${n}.`);
  return n;
}

/** The command that reaches one server of the set, as a hint prints it (the variable's URL is not inlined: it holds the password). */
function hintPrefix(self: Command, flags: ServerFlags, name: string): string {
  const source = resolveUrl(globals(self).url).source;
  return flags.server.length === 0 && source !== '--url' ? programName() : `${programName()} --url ${shellWord(name)}`;
}

/** A status row's error in CLI words: the library's `migrate(knex, …)` becomes the command that installs it on that server. */
function cliHint(error: string, prefix: string): string {
  return error.replace(
    /Run migrate\(knex, .*?\) \(CLI: idlease (migrate[^)]*)\) first\./,
    (_, m: string) => `Run \`${prefix} ${m}\` first.`,
  );
}

export function registerTicketCommands(program: Command): void {
  const tickets = program
    .command('tickets')
    .description('ticket servers (Flickr style): draw IDs, inspect the servers, grow the set')
    .addHelpText(
      'after',
      `
Examples:
  idlease tickets next -n 3 --server mysql://root@db1/app --server mysql://root@db2/app
  idlease tickets status --server mysql://root@db1/app --server mysql://root@db2/app
  idlease tickets reshard --server mysql://root@db1/app --server mysql://root@db2/app --server mysql://root@db3/app`,
    );

  serverOptions(tickets.command('next').description('draw IDs from the ticket servers (round-robin, with failover)'))
    .option('-n, --count <n>', `how many IDs (at most ${MAX_TICKETS_PER_CALL}: each is a statement)`, ticketCount, 1)
    .action(async (flags: ServerFlags & { count: number }, self: Command) => {
      await withServers(self, flags, async (servers) => {
        const alloc = createTicketAllocator({ servers, increment: flags.increment, sequence: flags.sequence, timeoutMs: waitMs(self) });
        try {
          const ids: bigint[] = [];
          try {
            for (let i = 0; i < flags.count; i++) ids.push(await alloc.next());
          } catch (err) {
            // The counters' last tickets were drawn: print them (not burned), then say why the run is short.
            if (ids.length > 0 && isIdleaseError(err, 'EXHAUSTED')) print(self, ids.map(String), { ids });
            throw err;
          }
          print(self, ids.map(String), { ids });
        } finally {
          await alloc.close();
        }
      });
    });

  serverOptions(
    tickets.command('status').description('each server: offset/increment as the server sees them, engine, health, last ID'),
  ).action(async (flags: ServerFlags, self: Command) => {
    await withServers(self, flags, async (servers) => {
      const alloc = createTicketAllocator({
        servers,
        increment: flags.increment,
        sequence: flags.sequence,
        timeoutMs: 3000,
        statementTimeoutMs: 2000,
      });
      try {
        await alloc.ready().catch(() => undefined); // a refused server is reported below, not thrown
        const st = await alloc.status();
        // Nothing answered: there is no status to show, and a script must not read success.
        if (st.every((s) => s.health !== 'refused' && !s.server)) {
          throw new IdleaseError(
            'DB_UNAVAILABLE',
            `no ticket server answered (${st.map((s) => `${s.name}: ${s.lastError ?? 'down'}`).join('; ')}): check that they are running and reachable, then rerun.`,
          );
        }
        const rows = st.map((s) => ({
          server: s.name,
          // Refused (not migrated, wrong pair) says more than the 'down' of a server whose facts could not be read.
          health: s.health === 'refused' || s.server ? s.health : 'down',
          offset: s.server?.scheme.offset,
          increment: s.server?.scheme.increment,
          sessionOffset: s.server?.sessionOffset,
          sessionIncrement: s.server?.sessionIncrement,
          myCnfOffset: s.server?.globalOffset,
          myCnfIncrement: s.server?.globalIncrement,
          engine: s.server?.engine,
          generation: s.server?.scheme.generation,
          open: s.server?.scheme.open,
          lastId: s.server?.lastId,
          error: s.lastError === undefined ? undefined : cliHint(s.lastError, hintPrefix(self, flags, s.name)),
        }));
        print(
          self,
          rows.map(
            (r) =>
              `${r.server}  ${r.health}  offset ${r.offset ?? '?'}/${r.increment ?? '?'}` +
              (r.sessionIncrement !== undefined
                ? ` (session ${r.sessionOffset}/${r.sessionIncrement}, my.cnf ${r.myCnfOffset}/${r.myCnfIncrement})`
                : '') +
              `  engine ${r.engine ?? '?'}  last ${r.lastId ?? '-'}${r.open === false ? '  CLOSED (reshard in progress)' : ''}${r.error ? `  error: ${r.error}` : ''}`,
          ),
          { sequence: flags.sequence, servers: rows },
        );
        // Servers open under different increments (or sharing an offset) repeat IDs between them:
        // the rows above show which, and a script must not read success.
        const why = schemeDisagreement(
          rows.flatMap((r) => (r.open === true ? [{ name: r.server, increment: r.increment!, offset: r.offset! }] : [])),
        );
        if (why !== undefined)
          throw new IdleaseError(
            'BAD_CONFIG',
            `${why}: allocators refuse to draw from such a set. Move every server of it to one scheme with \`idlease tickets reshard\`, naming them all.`,
            {
              cli: {
                message: `${why}: allocators refuse to draw from such a set. Move every server of it to one scheme with \`${programName()} tickets reshard --server <url> …\`, naming them all (docs/tickets.md).`,
              },
            },
          );
      } finally {
        await alloc.close();
      }
    });
  });

  serverOptions(
    tickets
      .command('reshard')
      .description('move every server to a new increment/offsets, above the global maximum; safe while IDs are drawn'),
  )
    .option('--retire <url>', 'a server leaving the set (repeat): fenced and left closed', collect, [] as string[])
    .option(
      '--vacant-offsets <list>',
      'offsets of the present increment that no server serves (room left to grow), e.g. 3,4: a reshard must otherwise name a server for each',
      offsetList,
    )
    .option(
      '--margin <n>',
      'start this many IDs above the global maximum (after a failover that may have lost draws; docs/failover.md)',
      nonNegativeBig,
    )
    .action(async (flags: ServerFlags & { retire: string[]; margin?: bigint; vacantOffsets?: number[] }, self: Command) => {
      await withServers(self, flags, async (servers) => {
        const retired = await Promise.all(flags.retire.map(async (u) => ({ knex: await openDatabase(self, u, 2), name: redact(u) })));
        try {
          await Promise.all(retired.map((x, i) => refuseBadConnection(x.knex, flags.retire[i], 0, false)));
          const r = await reshardTickets({
            servers,
            increment: flags.increment,
            sequence: flags.sequence,
            retire: retired,
            margin: flags.margin,
            ...(flags.vacantOffsets !== undefined ? { vacantOffsets: flags.vacantOffsets } : {}),
          });
          print(
            self,
            [
              `global maximum ${r.globalMax}; increment ${r.increment}`,
              ...r.servers.map((s) => `${s.name}  offset ${s.offset}  next ID ${s.firstId}`),
            ],
            r,
          );
        } finally {
          await Promise.all(retired.map((x) => x.knex.destroy()));
        }
      });
    });
}
