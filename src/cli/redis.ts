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
import { redisKeyStatus } from '../redis-sequence/status.js';
import { createRedisSequence } from '../redis-sequence/sequence.js';
import { beforeDeadline } from '../runtime/deadline.js';
import { redact } from '../urls.js';
import { positiveInt, print, waitMs, withKnex } from './context.js';

interface StatusFlags {
  redisUrl?: string;
  keyPrefix: string;
}

/** --redis-url, else $IDLEASE_REDIS_URL, else the local default. */
export function redisUrlOf(flag: string | undefined): string {
  return flag ?? (process.env.IDLEASE_REDIS_URL || 'redis://127.0.0.1:6379');
}

/**
 * A node-redis client on `url` for the length of `use`; REDIS_UNAVAILABLE when it has not connected
 * within --wait (a server that is down, refuses the password or never answers: a client that
 * reconnects would otherwise wait forever). `reconnect`: a long-lived client (serve) reconnects
 * after a loss; a one-shot command does not.
 */
export async function withRedis<T>(cmd: Command, url: string, use: (client: unknown) => Promise<T>, reconnect = false): Promise<T> {
  if (!/^rediss?:\/\/./i.test(url)) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${redact(url)} is not a Redis URL: give redis://host:6379 (or rediss:// for TLS) with --redis-url or $IDLEASE_REDIS_URL.`,
    );
  }
  let createClient: (options: object) => {
    connect(): Promise<unknown>;
    destroy(): void;
    on(e: string, f: (err: unknown) => void): unknown;
  };
  try {
    ({ createClient } = (await import('redis')) as unknown as { createClient: typeof createClient });
  } catch (err) {
    throw new IdleaseError('BAD_CONFIG', 'idlease redis needs the node-redis client: npm install redis.', { cause: err });
  }
  const { url: clientUrl, ca } = redisTls(url);
  const client = createClient({
    url: clientUrl,
    socket: {
      connectTimeout: waitMs(cmd),
      reconnectStrategy: reconnect ? (retries: number) => Math.min(50 * 2 ** retries, 2_000) : false,
      ...(ca === undefined ? {} : { tls: true, ca }),
    },
  });
  let lastError: unknown;
  client.on('error', (err: unknown) => {
    lastError = err;
  });
  try {
    await beforeDeadline(client.connect(), waitMs(cmd), () => new Error(`no connection within ${waitMs(cmd)} ms (--wait)`));
  } catch (err) {
    client.destroy();
    const tls = [err, lastError].find((e) => classifyDriverError(e) === 'tls');
    if (tls !== undefined)
      throw new IdleaseError(
        'BAD_CONFIG',
        `Redis at ${redact(url)}: TLS failed (${String((tls as Error)?.message ?? tls)}). Check the rediss:// URL's host name and its ?ca= file.`,
        { cause: tls },
      );
    const why =
      lastError !== undefined && lastError !== err
        ? `${String((err as Error)?.message ?? err)}; last error: ${String((lastError as Error)?.message ?? lastError)}`
        : String((err as Error)?.message ?? err);
    throw new IdleaseError(
      'REDIS_UNAVAILABLE',
      `Redis at ${redact(url)} did not answer: ${why}. Check --redis-url (or $IDLEASE_REDIS_URL), its password, and that the server is up.`,
      { cause: err },
    );
  }
  try {
    return await use(client);
  } finally {
    client.destroy();
  }
}

/**
 * `rediss://host:port?ca=/path/ca.pem`: TLS checked against that CA (the host name too); without
 * `ca`, against the system's CAs. node-redis reads the rest of the URL itself.
 */
export function redisTls(url: string): { url: string; ca?: string } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new IdleaseError(
      'BAD_CONFIG',
      `Cannot parse the Redis URL ${redact(url)}. Use redis://[:password@]host:6379 or rediss://… for TLS.`,
    );
  }
  const file = parsed.searchParams.get('ca') ?? undefined;
  if (file === undefined) return { url };
  if (parsed.protocol !== 'rediss:')
    throw new IdleaseError('BAD_CONFIG', `?ca= is for TLS: use rediss:// instead of ${parsed.protocol}// in ${redact(url)}.`);
  parsed.searchParams.delete('ca');
  try {
    return { url: parsed.toString(), ca: readFileSync(file, 'utf8') };
  } catch (cause) {
    throw new IdleaseError('BAD_CONFIG', `Cannot read the CA ${file} named in the Redis URL: ${(cause as Error).message}.`, { cause });
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
    .option('--redis-url <url>', 'redis://… (default: $IDLEASE_REDIS_URL, else redis://127.0.0.1:6379)')
    .option('--key-prefix <prefix>', 'prefix of the key, as the keyPrefix option', 'idlease:seq:')
    .option('--table <name>', 'segment table', 'idlease_segments')
    .option('--schema <name>', "PostgreSQL schema of idlease's tables (default idlease)")
    .action(
      async (
        tag: string,
        flags: { count: number; redisUrl?: string; keyPrefix: string; table: string; schema?: string },
        self: Command,
      ) => {
        if (flags.count > 1_000_000)
          throw new IdleaseError('BAD_ARGUMENT', `-n must be at most 1000000, got ${flags.count}; run the command again for more.`);
        const ids = await withKnex(self, (knex) =>
          withRedis(self, redisUrlOf(flags.redisUrl), async (client) => {
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
    .option('--redis-url <url>', 'redis://… (default: $IDLEASE_REDIS_URL, else redis://127.0.0.1:6379)')
    .option('--key-prefix <prefix>', 'prefix of the key, as the keyPrefix option', 'idlease:seq:')
    .action(async (tag: string, flags: StatusFlags, cmd: Command) => {
      const url = redisUrlOf(flags.redisUrl);
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
          `tag ${tag} (key ${flags.keyPrefix}${tag}) on ${redact(url)}: ${state}`,
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
          key: flags.keyPrefix + tag,
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
