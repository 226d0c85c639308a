/**
 * `idlease redis status <tag>`: what the tag's Redis key holds and whether the Redis that
 * answers installed it (a restarted, restored or promoted server did not: its next call
 * re-seeds). Read-only: the key is never reset from here. node-redis (`redis`) is loaded only
 * when the command runs; it is an optional peer dependency.
 */
import type { Command } from 'commander';
import { IdleaseError } from '../errors.js';
import { redisKeyStatus } from '../redis-sequence/status.js';
import { redact } from '../urls.js';
import { print, waitMs } from './context.js';

interface StatusFlags {
  redisUrl?: string;
  keyPrefix: string;
}

/**
 * A node-redis client on `url` for the length of `use`; REDIS_UNAVAILABLE when it cannot connect
 * at first. `reconnect`: a long-lived client (serve) reconnects after a loss; a one-shot command does not.
 */
export async function withRedis<T>(cmd: Command, url: string, use: (client: unknown) => Promise<T>, reconnect = false): Promise<T> {
  if (!/^rediss?:\/\/./i.test(url)) {
    throw new IdleaseError(
      'BAD_CONFIG',
      `${redact(url)} is not a Redis URL: give redis://host:6379 (or rediss:// for TLS) with --redis-url or $IDLEASE_REDIS_URL.`,
    );
  }
  let createClient: (options: object) => { connect(): Promise<unknown>; destroy(): void; on(e: string, f: () => void): unknown };
  try {
    ({ createClient } = (await import('redis')) as unknown as { createClient: typeof createClient });
  } catch (err) {
    throw new IdleaseError('BAD_CONFIG', 'idlease redis needs the node-redis client: npm install redis.', { cause: err });
  }
  const client = createClient({
    url,
    socket: { connectTimeout: waitMs(cmd), reconnectStrategy: reconnect ? (retries: number) => Math.min(50 * 2 ** retries, 2_000) : false },
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (err) {
    throw new IdleaseError(
      'REDIS_UNAVAILABLE',
      `Redis at ${redact(url)} did not answer: ${String((err as Error)?.message ?? err)}. Check --redis-url (or $IDLEASE_REDIS_URL) and that the server is up.`,
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
  const redis = program.command('redis').description('inspect Redis sequences: status');
  redis
    .command('status <tag>')
    .description("the tag's Redis key: window, prefetched window, high-water mark, and whether this Redis incarnation installed it")
    .option('--redis-url <url>', 'redis://… (default: $IDLEASE_REDIS_URL, else redis://127.0.0.1:6379)')
    .option('--key-prefix <prefix>', 'prefix of the key, as the keyPrefix option', 'idlease:seq:')
    .action(async (tag: string, flags: StatusFlags, cmd: Command) => {
      const url = flags.redisUrl ?? process.env.IDLEASE_REDIS_URL ?? 'redis://127.0.0.1:6379';
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
          `  server incarnation   ${s.identity}`,
          `  installed by         ${s.installedBy || '-'}`,
          `  current window       ${s.current ? `${range(s.current.base, s.current.size)}, ${s.current.issued} issued, last ${s.current.issued > 0 ? s.current.base + BigInt(s.current.issued) : '-'}` : '-'}`,
          `  prefetched window    ${s.queued ? range(s.queued.base, s.queued.size) : '-'}`,
          `  unissued             ${left} (a gap if this Redis is lost now)`,
          `  high-water mark      ${s.high}`,
        ],
        {
          tag,
          key: flags.keyPrefix + tag,
          state: !s.installedBy ? 'missing' : s.live ? 'live' : 'stale',
          identity: s.identity,
          installedBy: s.installedBy,
          current: s.current && { start: s.current.base + 1n, end: s.current.base + BigInt(s.current.size), issued: s.current.issued },
          queued: s.queued && { start: s.queued.base + 1n, end: s.queued.base + BigInt(s.queued.size) },
          unissued: left,
          high: s.high,
        },
      );
    });
}
