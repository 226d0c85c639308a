/** createTicketAllocator's options: checked, defaulted and frozen; each server turned into a TicketSource. */
import { declaredEngine } from '../dialects/engine.js';
import type { SqlExecutor } from '../dialects/sql.js';
import { executorFor, mysqlSettingsOf, type KnexLike } from '../drivers/index.js';
import { IdleaseError } from '../errors.js';
import type { Clock } from '../runtime/clock.js';
import { clockOption, intOption, rejectUnknownKeys } from '../validate.js';
import { resolveServerSet } from './config.js';
import type { TicketSource } from './source.js';
import { mysqlTicketSource, postgresTicketSource } from './sql-source.js';
import type { TicketAllocatorOptions, TicketEvent, TicketServerOptions } from './types.js';

export const TICKET_DEFAULTS = Object.freeze({
  statementTimeoutMs: 2000,
  timeoutMs: 5000,
  lockRetries: 10,
  backoffInitialMs: 100,
  backoffMaxMs: 5000,
  connectionsPerServer: 8,
  closeTimeoutMs: 5000,
});

const KNOWN = [
  'servers',
  'increment',
  'sequence',
  'schema',
  'statementTimeoutMs',
  'timeoutMs',
  'lockRetries',
  'backoffInitialMs',
  'backoffMaxMs',
  'connectionsPerServer',
  'closeTimeoutMs',
  'onEvent',
  'clock',
];

export interface ResolvedTicketServer {
  readonly name: string;
  /** The offset the options name; the server's scheme row must agree at first contact. */
  readonly offset: number;
  readonly source: TicketSource;
}

export interface ResolvedTicketOptions {
  readonly servers: readonly ResolvedTicketServer[];
  readonly increment: number;
  readonly sequence: string;
  readonly schema: string | undefined;
  readonly statementTimeoutMs: number;
  readonly timeoutMs: number;
  readonly lockRetries: number;
  readonly backoffInitialMs: number;
  readonly backoffMaxMs: number;
  readonly connectionsPerServer: number;
  readonly closeTimeoutMs: number;
  readonly onEvent: ((event: TicketEvent) => void) | undefined;
  readonly clock: Clock;
}

type Scalars = Omit<ResolvedTicketOptions, 'servers'>;

function positiveInt(value: unknown, name: keyof typeof TICKET_DEFAULTS): number {
  return intOption(value, name, { min: 1, max: Number.MAX_SAFE_INTEGER, default: TICKET_DEFAULTS[name] });
}

/** A server given as a database handle: exactly one of knex and pool (and source, where one is taken). */
export interface ServerHandle {
  readonly knex?: KnexLike;
  readonly pool?: unknown;
  readonly source?: unknown;
}

/** The handle `where` (e.g. `servers[0]`) names, its option name for messages, and the executor on it. */
export function serverHandle(s: ServerHandle, where: string): { handle: unknown; option: string; db: SqlExecutor } {
  const given = (['knex', 'pool', 'source'] as const).filter((k) => s[k] !== undefined);
  if (given.length > 1) throw new IdleaseError('BAD_CONFIG', `${where} has both ${given.join(' and ')}: give one.`);
  if (s.pool === undefined && (!s.knex || typeof s.knex.raw !== 'function')) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${where}.knex must be a Knex instance (idlease.connect(url) makes one), or give ${where}.pool (a mysql2, pg or postgres.js pool).`,
    );
  }
  const handle = s.pool ?? s.knex;
  const option = `${where}.${s.pool !== undefined ? 'pool' : 'knex'}`;
  return { handle, option, db: executorFor(handle, option) };
}

const SOURCE_METHODS = ['draw', 'readScheme', 'facts', 'probe', 'close'] as const;

/** One server's source, from exactly one of knex, pool and source. */
function sourceOf(s: TicketServerOptions, i: number, o: Scalars): TicketSource {
  if (s.source !== undefined && s.knex === undefined && s.pool === undefined) {
    const missing = SOURCE_METHODS.filter((m) => typeof (s.source as unknown as Record<string, unknown>)[m] !== 'function');
    if (missing.length > 0)
      throw new IdleaseError(
        'BAD_CONFIG',
        `servers[${i}].source must be a TicketSource (${SOURCE_METHODS.join(', ')}); it has no ${missing.join(', ')}.`,
      );
    return s.source;
  }
  const { handle, option, db } = serverHandle(s, `servers[${i}]`);
  const ref = { schema: o.schema, sequence: o.sequence };
  // A sequence draws on the app's own pool; a counter table on sessions of idlease's own (the pair is session state).
  if (declaredEngine(db).ticketCounter === 'sequence') return postgresTicketSource(db, ref);
  if (o.schema !== undefined)
    throw new IdleaseError('BAD_CONFIG', 'schema applies to PostgreSQL only; on MySQL the connection’s database is used.');
  return mysqlTicketSource(mysqlSettingsOf(handle, option), {
    ref,
    pair: { increment: o.increment, offset: s.offset },
    sessions: o.connectionsPerServer,
    connectTimeoutMs: o.statementTimeoutMs,
    lockWaitTimeoutS: Math.max(1, Math.floor(o.statementTimeoutMs / 2000)),
  });
}

export function resolveTicketOptions(options: TicketAllocatorOptions): ResolvedTicketOptions {
  if (options !== null && typeof options === 'object') rejectUnknownKeys(options, KNOWN, 'createTicketAllocator');
  const { increment, sequence, schema } = resolveServerSet(options, 'createTicketAllocator({ servers: [{ knex, offset: 1 }, …] })');
  if (options.onEvent !== undefined && typeof options.onEvent !== 'function')
    throw new IdleaseError('BAD_CONFIG', 'onEvent must be a function (event) => void.');
  const scalars: Scalars = {
    increment,
    sequence,
    schema,
    statementTimeoutMs: positiveInt(options.statementTimeoutMs, 'statementTimeoutMs'),
    timeoutMs: positiveInt(options.timeoutMs, 'timeoutMs'),
    lockRetries: positiveInt(options.lockRetries, 'lockRetries'),
    backoffInitialMs: positiveInt(options.backoffInitialMs, 'backoffInitialMs'),
    backoffMaxMs: positiveInt(options.backoffMaxMs, 'backoffMaxMs'),
    connectionsPerServer: positiveInt(options.connectionsPerServer, 'connectionsPerServer'),
    closeTimeoutMs: positiveInt(options.closeTimeoutMs, 'closeTimeoutMs'),
    onEvent: options.onEvent,
    clock: clockOption(options.clock),
  };
  const servers: ResolvedTicketServer[] = [];
  try {
    options.servers.forEach((s, i) =>
      servers.push(Object.freeze({ name: s.name ?? `server${s.offset}`, offset: s.offset, source: sourceOf(s, i, scalars) })),
    );
  } catch (err) {
    // Sources made here before the bad one hold nothing yet, but are closed all the same; a caller's own are the caller's.
    servers.forEach((s, i) => void (options.servers[i]!.source === undefined && s.source.close().catch(() => undefined)));
    throw err;
  }
  return Object.freeze({ ...scalars, servers: Object.freeze(servers) });
}
