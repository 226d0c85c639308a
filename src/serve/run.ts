/**
 * The serve process's life: start, log one JSON line per start/stop/error to stderr, and on
 * SIGTERM/SIGINT stop accepting, let requests in flight finish (bounded), close every
 * allocator (unused tails given back) and return. A second signal exits at once.
 */
import { pino, type Logger } from 'pino';
import { redact } from '../connect.js';
import { startServer, type ServeOptions } from './server.js';

export interface RunServeOptions extends Omit<ServeOptions, 'logger'> {
  /** How long a shutdown waits for requests in flight. Default 10,000 ms. */
  readonly shutdownTimeoutMs?: number;
  /** Where the URL came from, for the start line (credentials redacted). */
  readonly target: string;
  readonly logger?: Logger;
  /** Called once listening, with the URL (the CLI records it where other commands look). */
  readonly onListening?: (url: string) => void;
  /** Called when a signal starts the shutdown, before requests in flight finish. */
  readonly onStopping?: () => void;
  /** The database forgets everything when this process exits (pglite:memory): said in the start line. */
  readonly ephemeral?: boolean;
}

export function serveLogger(): Logger {
  return pino({ base: { service: 'idlease' }, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ fd: 2, sync: true }));
}

export async function runServe(o: RunServeOptions): Promise<void> {
  const logger = o.logger ?? serveLogger();
  const server = await startServer({ ...o, logger });
  logger.info(
    { event: 'start', url: server.url, database: redact(o.target), tags: o.tags ?? 'all', auth: o.token ? 'token' : 'none' },
    `idlease serve listening on ${server.url}`,
  );
  if (o.ephemeral)
    logger.warn(
      { event: 'ephemeral' },
      'pglite:memory: IDs are kept only while this server runs; a restart starts from 1 again and repeats them',
    );
  o.onListening?.(server.url);
  process.stdout.write(`${server.url}\n`);
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  const again = (s: NodeJS.Signals) => {
    logger.warn({ event: 'exit-now', signal: s }, 'second signal: exiting without waiting');
    process.exit(1);
  };
  process.once('SIGTERM', again);
  process.once('SIGINT', again);
  logger.info({ event: 'stopping', signal }, 'stopping: no new connections, finishing requests in flight');
  o.onStopping?.();
  await server.close(o.shutdownTimeoutMs ?? 10_000);
  const given = [...server.allocators.values()].reduce((sum, a) => sum + a.stats().givenBack, 0n);
  logger.info({ event: 'stop', givenBack: given.toString() }, 'stopped');
}
