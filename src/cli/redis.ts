/**
 * `idlease redis next <tag> [-n N]`: IDs from the tag's Redis sequence (the database named by --url
 * leases its windows). `idlease redis status <tag>`: what the tag's Redis key holds and whether the Redis that
 * answers installed it (a restarted, restored or promoted server did not: its next call
 * re-seeds). Read-only: the key is never reset from here. node-redis (`redis`) is loaded only
 * when the command runs; it is an optional peer dependency.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { classifyDriverError } from '../dialects/driver-errors.js';
import { IdleaseError } from '../errors.js';
import { redisKeyName } from '../redis-sequence/keys.js';
import { redisKeyStatus } from '../redis-sequence/status.js';
import { createRedisSequence } from '../redis-sequence/sequence.js';
import { beforeDeadline } from '../runtime/deadline.js';
import { parseRedisTarget, redact } from '../urls.js';
import { positiveInt, print, waitMs, withKnex } from './context.js';

interface StatusFlags extends RedisUrlFlags {
  keyPrefix: string;
}

export interface RedisUrlFlags {
  redisUrl?: string;
  redisUrlFile?: string;
}

const LOCAL_REDIS = 'redis://127.0.0.1:6379';

/**
 * The Redis URL, first of: --redis-url, --redis-url-file, $IDLEASE_REDIS_URL, $REDIS_URL (what the
 * README's library sample and most Redis tooling read), then `fallback`. A password in --redis-url
 * stands in `ps`; the file and the variables keep it out.
 */
export function redisUrlOf(flags: RedisUrlFlags, fallback: string | undefined = LOCAL_REDIS): string | undefined {
  if (flags.redisUrl !== undefined && flags.redisUrlFile !== undefined)
    throw new IdleaseError('BAD_ARGUMENT', 'Give --redis-url or --redis-url-file, not both.');
  if (flags.redisUrl !== undefined) return flags.redisUrl;
  if (flags.redisUrlFile !== undefined) {
    let url: string;
    try {
      url = readFileSync(flags.redisUrlFile, 'utf8').replace(/\r?\n$/, '');
    } catch (cause) {
      throw new IdleaseError('BAD_CONFIG', `Cannot read the Redis URL file ${flags.redisUrlFile}: ${(cause as Error).message}.`, { cause });
    }
    if (url.trim() === '')
      throw new IdleaseError('BAD_CONFIG', `The Redis URL file ${flags.redisUrlFile} is empty: write redis://… in it.`);
    return url;
  }
  return process.env.IDLEASE_REDIS_URL || process.env.REDIS_URL || fallback;
}

/**
 * serve's Redis URL: --redis-url, --redis-url-file or $IDLEASE_REDIS_URL; none otherwise. Not
 * $REDIS_URL: serve's Redis routes are opt-in, and a variable set for another program must not
 * make serve depend on a Redis.
 */
export function serveRedisUrl(flags: RedisUrlFlags): string | undefined {
  if (flags.redisUrl !== undefined || flags.redisUrlFile !== undefined) return redisUrlOf(flags);
  return process.env.IDLEASE_REDIS_URL || undefined;
}

/** --help text of --redis-url and --redis-url-file (redis next, redis status, serve). */
export const REDIS_URL_HELP =
  'redis://[:password@]host:6379[/db], rediss://… (TLS, ?ca=file), or a Redis Cluster: redis+cluster://[:password@]host1:port1,host2:port2 (default: $IDLEASE_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379). A password here is visible in the process list: prefer --redis-url-file or $IDLEASE_REDIS_URL';
export const REDIS_URL_FILE_HELP =
  'read the Redis URL from this file (keeps its password out of the process list; trailing newline ignored)';

/** A Redis URL, taken apart: one server, or the seed nodes of a Redis Cluster. */
interface ClientLike {
  connect(): Promise<unknown>;
  destroy(): void;
  on(e: string, f: (...args: unknown[]) => void): unknown;
}

/** A wrong password or user: no retry fixes it (BAD_CONFIG, exit 2), unlike a server that is down. */
function isAuthFailure(err: unknown): boolean {
  return /WRONGPASS|NOAUTH|invalid password|invalid username-password|AUTH <password> called without any password/i.test(
    String((err as Error)?.message ?? err),
  );
}

/**
 * A node-redis client on `url` for the length of `use` (a cluster client for a redis+cluster://
 * URL); REDIS_UNAVAILABLE when it has not connected within --wait (a server that is down or never
 * answers: a client that reconnects would otherwise wait forever), BAD_CONFIG when it refuses the
 * password. `reconnect`: a long-lived client (serve) reconnects after a loss; a one-shot command
 * does not.
 */
export async function withRedis<T>(cmd: Command, url: string, use: (client: unknown) => Promise<T>, reconnect = false): Promise<T> {
  const target = parseRedisTarget(url);
  let mod: { createClient: (options: object) => ClientLike; createCluster: (options: object) => ClientLike };
  try {
    mod = (await import('redis')) as unknown as typeof mod;
  } catch (err) {
    throw new IdleaseError('BAD_CONFIG', 'idlease redis needs the node-redis client: npm install redis.', { cause: err });
  }
  const socket = {
    connectTimeout: waitMs(cmd),
    reconnectStrategy: reconnect ? (retries: number) => Math.min(50 * 2 ** retries, 2_000) : false,
    ...(target.tls ? { tls: true } : {}),
    ...(target.ca === undefined ? {} : { ca: target.ca }),
  };
  const client = target.cluster
    ? mod.createCluster({
        rootNodes: target.nodes.map((u) => ({ url: u })),
        // What every node the cluster names is connected with: the seeds' password, TLS and bounds.
        defaults: {
          ...(target.username === undefined ? {} : { username: target.username }),
          ...(target.password === undefined ? {} : { password: target.password }),
          // A cluster node that stops answering is given up quickly: the client learns the new
          // master from the others (a one-shot command), or keeps reconnecting (serve).
          socket: { ...socket, reconnectStrategy: reconnect ? socket.reconnectStrategy : () => 100 },
        },
      })
    : mod.createClient({ url: target.nodes[0], socket });
  let lastError: unknown;
  client.on('error', (err: unknown) => {
    lastError = err;
  });
  client.on('node-error', (err: unknown) => {
    lastError = err;
  });
  try {
    // A server that wants a password and was given none accepts the connection and refuses the
    // first command (NOAUTH): asked here, so that it is said as what it is. (A cluster client's
    // connect already asks each seed for its slots.)
    const ready = (async () => {
      await client.connect();
      if (!target.cluster) await (client as unknown as { sendCommand(a: string[]): Promise<unknown> }).sendCommand(['PING']);
    })();
    await beforeDeadline(ready, waitMs(cmd), () => new Error(`no connection within ${waitMs(cmd)} ms (--wait)`));
  } catch (err) {
    client.destroy();
    const tls = [err, lastError].find((e) => classifyDriverError(e) === 'tls');
    if (tls !== undefined)
      throw new IdleaseError(
        'BAD_CONFIG',
        `Redis at ${redact(url)}: TLS failed (${String((tls as Error)?.message ?? tls)}). Check the rediss:// URL's host name and its ?ca= file.`,
        { cause: tls },
      );
    const auth = [err, lastError].find(isAuthFailure);
    if (auth !== undefined)
      throw new IdleaseError(
        'BAD_CONFIG',
        `Redis at ${redact(url)} refused the credentials (${String((auth as Error)?.message ?? auth).replace(/\.$/, '')}). Check the password (and user) in the Redis URL (--redis-url-file, $IDLEASE_REDIS_URL or $REDIS_URL).`,
        { cause: auth },
      );
    const why =
      lastError !== undefined && lastError !== err
        ? `${String((err as Error)?.message ?? err)}; last error: ${String((lastError as Error)?.message ?? lastError)}`
        : String((err as Error)?.message ?? err);
    throw new IdleaseError(
      'REDIS_UNAVAILABLE',
      `Redis at ${redact(url)} did not answer: ${why}. Check --redis-url (or --redis-url-file, $IDLEASE_REDIS_URL, $REDIS_URL) and that the server is up.`,
      { cause: err },
    );
  }
  try {
    return await use(client);
  } finally {
    client.destroy();
  }
}

export function registerRedisCommands(program: Command): void {
  const redis = program.command('redis').description('Redis sequences: next | status');
  redis
    .command('next <tag>')
    .description(
      'print IDs from the tag\'s Redis sequence, windows leased from the database (--url) (one per line; --json: {"tag","ids":[strings]})',
    )
    .option('-n, --count <n>', 'how many IDs (at most 1000000)', positiveInt('-n'), 1)
    .option('--redis-url <url>', REDIS_URL_HELP)
    .option('--redis-url-file <file>', REDIS_URL_FILE_HELP)
    .option('--key-prefix <prefix>', 'prefix of the key, as the keyPrefix option', 'idlease:seq:')
    .option('--table <name>', 'segment table', 'idlease_segments')
    .option('--schema <name>', "PostgreSQL schema of idlease's tables (default idlease)")
    .action(
      async (
        tag: string,
        flags: { count: number; redisUrl?: string; redisUrlFile?: string; keyPrefix: string; table: string; schema?: string },
        self: Command,
      ) => {
        if (flags.count > 1_000_000)
          throw new IdleaseError('BAD_ARGUMENT', `-n must be at most 1000000, got ${flags.count}; run the command again for more.`);
        const ids = await withKnex(self, (knex) =>
          withRedis(self, redisUrlOf(flags)!, async (client) => {
            const seq = createRedisSequence({
              redis: client,
              knex,
              tag,
              table: flags.table,
              schema: flags.schema,
              keyPrefix: flags.keyPrefix,
              waitTimeoutMs: waitMs(self),
              commandTimeoutMs: Math.min(1_000, waitMs(self)),
            });
            try {
              return await seq.nextBatch(flags.count);
            } finally {
              // Gives back the window this process queued; the current one stays in Redis for the next call.
              await seq.close();
            }
          }),
        );
        print(self, ids.map(String), { tag, ids });
      },
    );
  redis
    .command('status <tag>')
    .description("the tag's Redis key: window, prefetched window, high-water mark, and whether this Redis incarnation installed it")
    .option('--redis-url <url>', REDIS_URL_HELP)
    .option('--redis-url-file <file>', REDIS_URL_FILE_HELP)
    .option('--key-prefix <prefix>', 'prefix of the key, as the keyPrefix option', 'idlease:seq:')
    .action(async (tag: string, flags: StatusFlags, cmd: Command) => {
      const url = redisUrlOf(flags)!;
      const s = await withRedis(cmd, url, (client) => redisKeyStatus(client, tag, { keyPrefix: flags.keyPrefix, timeoutMs: waitMs(cmd) }));
      const left = (s.current ? BigInt(s.current.size - s.current.issued) : 0n) + BigInt(s.queued?.size ?? 0);
      const state = !s.installedBy
        ? 'no key: the next call seeds a window above the database row'
        : s.live
          ? 'live'
          : 'stale: installed by another Redis incarnation; the next call re-seeds above the database row';
      const range = (base: bigint, size: number) => `${base + 1n}…${base + BigInt(size)}`;
      print(
        cmd,
        [
          `tag ${tag} (key ${redisKeyName(flags.keyPrefix, tag)}) on ${redact(url)}: ${state}`,
          `  owner                ${s.owner || '- (none yet, or a key of idlease 0.2: the next call binds it)'}`,
          `  server incarnation   ${s.identity}`,
          `  installed by         ${s.installedBy || '-'}`,
          `  current window       ${s.current ? `${range(s.current.base, s.current.size)}, ${s.current.issued} issued, last ${s.current.issued > 0 ? s.current.base + BigInt(s.current.issued) : '-'}` : '-'}`,
          `  prefetched window    ${s.queued ? range(s.queued.base, s.queued.size) : '-'}`,
          `  unissued             ${left} (a gap if this Redis is lost now)`,
          `  high-water mark      ${s.high}`,
          `  highest ID issued    ${s.top > 0n ? s.top : '-'}`,
        ],
        {
          tag,
          key: redisKeyName(flags.keyPrefix, tag),
          state: !s.installedBy ? 'missing' : s.live ? 'live' : 'stale',
          owner: s.owner,
          identity: s.identity,
          installedBy: s.installedBy,
          current: s.current && { start: s.current.base + 1n, end: s.current.base + BigInt(s.current.size), issued: s.current.issued },
          queued: s.queued && { start: s.queued.base + 1n, end: s.queued.base + BigInt(s.queued.size) },
          unissued: left,
          high: s.high,
          top: s.top,
        },
      );
    });
}
