import type { Knex } from 'knex';
import { ownObjectName } from '../dialects/detect.js';
import type { Engine } from '../dialects/engine.js';
import { knexExecutor } from '../drivers/knex.js';
import {
  lastIssuedTicket,
  readScheme,
  ticketObjectName,
  ticketsDdl,
  upgradeSchemeFencing,
  type TicketEngine,
} from '../dialects/tickets.js';
import { IdleaseError, isIdleaseError } from '../errors.js';
import { validateSequenceName } from '../identifiers.js';
import { validateFailoverGap } from '../failover-gap.js';
import { runAll, stateLossError, type IdleaseMigration } from './types.js';

export interface TicketsMigrateOptions {
  /** Sequence names; one tickets table (MySQL) or sequence (Postgres) each. Default ['default']. */
  sequences?: string[];
  /**
   * MySQL/MariaDB storage engine of the tickets tables. Default 'InnoDB' (durable: every
   * ticket is an fsync'd commit, ~1,000/s per server). 'MyISAM' is 5–13× faster but a
   * host crash can lose the last counter moves, so IDs may repeat after one. See docs/tickets.md.
   */
  engine?: TicketEngine;
  /**
   * The pair this server serves: IDs ≡ offset (mod increment). Default 1/1 (one server).
   * For N servers migrate each with `increment: N` and its own offset 1..N, or migrate with
   * the defaults and run `idlease tickets reshard`.
   */
  increment?: number;
  offset?: number;
  /**
   * How far the first draw on another database instance (a promoted replica) moves the counter past
   * the highest ticket it finds, keeping the residue: more than the tickets the server issues during
   * the replication lag your HA setup allows (docs/failover.md). Default 10^10. Set when the scheme
   * row is made; later migrations keep it.
   */
  failoverGap?: bigint | number | string;
}

export interface ResolvedTickets {
  readonly sequences: readonly string[];
  readonly engine: TicketEngine;
  readonly increment: number;
  readonly offset: number;
  /** Whether the caller named increment or offset (then an installed scheme must match them). */
  readonly pairGiven: boolean;
  readonly failoverGap: bigint;
}

export function resolveTicketsOptions(input: boolean | TicketsMigrateOptions | undefined): ResolvedTickets | undefined {
  if (input === undefined || input === false) return undefined;
  const opts = input === true ? {} : input;
  const sequences = opts.sequences ?? ['default'];
  if (!Array.isArray(sequences) || sequences.length === 0) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `tickets.sequences must be a non-empty array of names, e.g. ['default'], got ${JSON.stringify(sequences)}.`,
    );
  }
  const engine = opts.engine ?? 'InnoDB';
  if (engine !== 'InnoDB' && engine !== 'MyISAM') {
    throw new IdleaseError('BAD_CONFIG', `tickets.engine must be 'InnoDB' or 'MyISAM', got ${JSON.stringify(engine)}.`);
  }
  const increment = opts.increment ?? 1;
  const offset = opts.offset ?? 1;
  if (!Number.isInteger(increment) || increment < 1 || increment > 65535) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `tickets.increment must be an integer 1..65535 (MySQL's auto_increment_increment range), got ${String(increment)}.`,
    );
  }
  if (!Number.isInteger(offset) || offset < 1 || offset > increment) {
    throw new IdleaseError('BAD_CONFIG', `tickets.offset must be an integer 1..increment (${increment}), got ${String(offset)}.`);
  }
  return Object.freeze({
    // Validated names; a sequence name becomes part of a table name, so 48 chars leaves room for the prefix.
    sequences: Object.freeze(sequences.map((s, i) => validateSequenceName(s, `tickets.sequences[${i}]`))),
    engine,
    increment,
    offset,
    pairGiven: opts.increment !== undefined || opts.offset !== undefined,
    failoverGap: validateFailoverGap(opts.failoverGap, 'tickets.failoverGap'),
  });
}

export function ticketsMigrations(
  engine: Engine,
  schema: string | undefined,
  opts: ResolvedTickets,
  dropState = false,
): IdleaseMigration[] {
  return opts.sequences.flatMap((sequence) => {
    const ref = { schema, sequence };
    const ddl = ticketsDdl(engine.sql, ref, {
      engine: opts.engine,
      increment: opts.increment,
      offset: opts.offset,
      failoverGap: opts.failoverGap,
    });
    // A counter that has issued tickets: a fresh one would issue them again.
    const refuseDown = async (knex: Knex): Promise<void> => {
      if (dropState) return;
      const last = await lastIssuedTicket(knexExecutor(knex), ref);
      if (last === undefined) return;
      throw stateLossError(
        `the ticket ${engine.ticketCounter} ${ownObjectName(engine.sql, schema, ticketObjectName(sequence))}`,
        `its counter has issued tickets up to ${last}`,
      );
    };
    const base: IdleaseMigration = {
      name: `tickets:${sequence}`,
      up: async (knex) => {
        await runAll(knex, ddl.up);
        await ddl.seed(knexExecutor(knex));
      },
      refuseDown,
      // Migrating again never moves an installed scheme: with a pair named that differs from it,
      // "nothing to do" would let the user believe the server now serves the new pair.
      refuseUp: async (knex) => {
        if (!opts.pairGiven) return;
        let scheme;
        try {
          scheme = await readScheme(knexExecutor(knex), ref);
        } catch (err) {
          if (isIdleaseError(err, 'NOT_MIGRATED')) return;
          throw err;
        }
        if (scheme.increment === opts.increment && scheme.offset === opts.offset) return;
        const is = `Ticket sequence "${sequence}" on this server already serves offset ${scheme.offset} of increment ${scheme.increment} (its scheme row), not ${opts.offset} of ${opts.increment}; migrate does not change an installed pair.`;
        throw new IdleaseError(
          'BAD_CONFIG',
          `${is} To give the servers a new increment and offsets use reshardTickets() (CLI: idlease tickets reshard) naming every server of the set, which starts above the global maximum; or leave increment/offset out.`,
          {
            cli: {
              message: `${is} To give the servers a new increment and offsets run \`idlease tickets reshard --server … --server …\` naming every server of the set (it starts above the global maximum; one that leaves a server out is refused); or leave --tickets-increment/--tickets-offset out.`,
            },
          },
        );
      },
      down: async (knex) => {
        await refuseDown(knex);
        await runAll(knex, ddl.down);
        await ddl.unseed(knexExecutor(knex));
      },
    };
    return [
      base,
      {
        // Version 2: the failover fence on the scheme row (instance, failover_gap, jumps, jumped_at).
        // A fresh install has it from the entry above; an older one gets the columns, this
        // sequence's counter marked with the instance this runs on. Down leaves them.
        name: `tickets:${sequence}:v2`,
        up: (knex) => upgradeSchemeFencing(knexExecutor(knex), ref),
        refuseDown,
        down: (knex) => refuseDown(knex),
      },
    ];
  });
}
