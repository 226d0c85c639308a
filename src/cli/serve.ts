/** `idlease serve`: flags only; the server lives in src/serve/. */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { InvalidArgumentError, type Command } from 'commander';
import { IdleaseError } from '../errors.js';
import { DEFAULT_MAX_BATCH } from '../serve/server.js';
import { pgliteTarget } from '../connect.js';
import { migrate } from '../migrations/migrate.js';
import { listTags } from '../segment/admin.js';
import { runServe } from '../serve/run.js';
import { describeTarget, positiveInt, programName, targetUrl, withKnex } from './context.js';
import { REDIS_URL_FILE_HELP, serveRedisUrl, withRedis } from './redis.js';

function portArg(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) > 65535)
    throw new InvalidArgumentError(`--port must be a TCP port from 0 to 65535 (0: any free port), got ${JSON.stringify(value)}.`);
  return Number(value);
}

function tagList(value: string): string[] {
  const tags = value
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t.length > 0);
  if (tags.length === 0) throw new InvalidArgumentError('--tags needs at least one tag, e.g. --tags order,invoice.');
  return tags;
}

export function registerServeCommand(program: Command): void {
  program
    .command('serve')
    .description(
      'serve IDs over HTTP (Leaf-compatible /api/segment/get/{tag} and /api/snowflake/get/{key}, batches, remote leases, /metrics)',
    )
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0: any free port, printed on stdout)', portArg, 8080)
    .option('--tags <list>', 'serve only these tags (comma-separated); default: every tag', tagList)
    .option(
      '--token <token>',
      'require Authorization: Bearer <token> on /api and /v1 (visible in the process list: prefer --token-file or $IDLEASE_TOKEN)',
    )
    .option('--token-file <file>', 'read the token from this file (default: $IDLEASE_TOKEN_FILE; trailing newline ignored)')
    .option('--protect-metrics', 'accepted for older scripts: /metrics takes the token whenever one is set (refused without a token)')
    .option('--allow-create', 'let requests carrying the token add a missing tag (/v1/segment/{tag}/ids?create=1)')
    .option(
      '--allowed-hosts <list>',
      'Host header names answered besides the loopback names and --host (comma-separated; against DNS rebinding). On --host 0.0.0.0 or :: without it: any',
      tagList,
    )
    .option(
      '--trust-proxy <list>',
      'IP addresses of your reverse proxies (comma-separated): wrong tokens from them count against the client their X-Forwarded-For names (elsewhere the header is ignored)',
      tagList,
    )
    .option(
      '--max-tags <n>',
      'tags created over HTTP (?create=1) stop when the server knows this many (default 1000)',
      positiveInt('--max-tags'),
    )
    .option('--allow-no-token', 'listen beyond loopback without a token (refused otherwise)')
    .option('--max-batch <n>', 'largest n of /ids (default 10000)', positiveInt('--max-batch'))
    .option(
      '--max-connections <n>',
      'open connections at most; beyond, the longest-idle is closed or the new one answered 503 (default 1024)',
      positiveInt('--max-connections'),
    )
    .option(
      '--max-connections-per-address <n>',
      'open connections from one client address at most (default 128)',
      positiveInt('--max-connections-per-address'),
    )
    .option('--max-pipelined <n>', 'requests waiting on one connection before it is closed (default 32)', positiveInt('--max-pipelined'))
    .option(
      '--max-step <n>',
      "largest lease the server's allocators take (default 10000000; smaller wastes less on a crash)",
      positiveInt('--max-step'),
    )
    .option('--table <name>', 'segment table', 'idlease_segments')
    .option(
      '--schema <name>',
      "PostgreSQL schema of idlease's tables (default idlease; public for an install kept where an older idlease put it)",
    )
    .option(
      '--snowflake-group <name>',
      'worker-id group of /api/snowflake/get/{key} (needs idlease migrate --workers on a server)',
      'serve',
    )
    .option(
      '--redis-url <url>',
      'also serve Redis sequences of the served tags (/api/redis/get/{tag}, /v1/redis/{tag}/ids; needs the redis package): redis://…, rediss://…, or redis+cluster://h1:p1,h2:p2 for a Redis Cluster (default: $IDLEASE_REDIS_URL; none when unset). A password here is visible in the process list: prefer --redis-url-file or $IDLEASE_REDIS_URL',
    )
    .option('--redis-url-file <file>', REDIS_URL_FILE_HELP)
    .option('--shutdown-timeout <ms>', 'how long SIGTERM waits for requests in flight', positiveInt('--shutdown-timeout'), 10_000)
    .addHelpText(
      'after',
      `
Tags are created over HTTP only by a request with the token on a server started with
--allow-create (and by \`idlease next\` beside a serve on the embedded database); else
\`idlease tag add <tag>\`. On the embedded
database (no --url) the table is created on first use. Logs are JSON lines on stderr; the
URL it listens on is printed on stdout. SIGTERM/SIGINT: finish requests in flight, give the
unused part of each lease back, exit 0; a second signal exits at once.

With a token, /metrics takes it too (only /healthz and /readyz stay open); beyond loopback the
token must be at least 16 bytes. Only requests whose Host is a loopback name, --host or one of
--allowed-hosts are answered. Bounds: 128 connections per client address, 1024 in all (the
longest-idle is closed to make room, else 503 + Retry-After); a request header within 10 s;
batches queued fairly across addresses (503 BUSY over budget). See docs/serve.md.`,
    )
    .action(
      async (
        flags: {
          host: string;
          port: number;
          tags?: string[];
          token?: string;
          tokenFile?: string;
          protectMetrics?: boolean;
          allowCreate?: boolean;
          allowedHosts?: string[];
          trustProxy?: string[];
          allowNoToken?: boolean;
          maxBatch?: number;
          maxConnections?: number;
          maxConnectionsPerAddress?: number;
          maxTags?: number;
          maxPipelined?: number;
          maxStep?: number;
          table: string;
          schema?: string;
          snowflakeGroup: string;
          shutdownTimeout: number;
          redisUrl?: string;
          redisUrlFile?: string;
        },
        self: Command,
      ) => {
        const embedded = pgliteTarget(targetUrl(self));
        const token = serveToken(flags);
        if (token === undefined && !isLoopback(flags.host) && !flags.allowNoToken)
          throw new IdleaseError(
            'BAD_CONFIG',
            `--host ${flags.host} listens beyond this machine without a token: give --token-file <file> (or $IDLEASE_TOKEN), or --allow-no-token if the network is the guard.`,
          );
        // A short token beyond loopback is guessed: 16 bytes at least (e.g. \`openssl rand -hex 16\`).
        if (token !== undefined && !isLoopback(flags.host) && Buffer.byteLength(token) < MIN_TOKEN_BYTES)
          throw new IdleaseError(
            'BAD_CONFIG',
            `The token is ${Buffer.byteLength(token)} bytes; beyond loopback (--host ${flags.host}) it must be at least ${MIN_TOKEN_BYTES}: make one with \`openssl rand -hex 16\`.`,
          );
        // An option that cannot do what it says is refused, not ignored (it used to start with "auth":"none").
        if (flags.protectMetrics && token === undefined)
          throw new IdleaseError(
            'BAD_CONFIG',
            '--protect-metrics needs a token to protect /metrics with: give --token-file <file> (or $IDLEASE_TOKEN); with a token, /metrics takes it anyway.',
          );
        if (flags.allowCreate && token === undefined)
          throw new IdleaseError(
            'BAD_CONFIG',
            '--allow-create lets requests carrying the token create tags, and no token is given: add --token-file <file> (or $IDLEASE_TOKEN), or leave --allow-create out.',
          );
        const redisUrl = serveRedisUrl(flags);
        // A secret of this run, written only into the lock file (0600) for the CLI of the same user.
        const runSecret = embedded?.dir !== undefined ? randomBytes(24).toString('base64url') : undefined;
        await withKnex(
          self,
          async (knex, { lock }) => {
            if (embedded) await migrate(knex, { schema: flags.schema, segments: { table: flags.table }, workers: true });
            // On a server nothing is created implicitly: a missing segment table is said at start
            // (NOT_MIGRATED, exit 2), not as a 500 on every request.
            else await listTags(knex, { table: flags.table, schema: flags.schema });
            const serve = (redis: unknown) =>
              runServe({
                redis,
                knex,
                host: flags.host,
                port: flags.port,
                tags: flags.tags,
                token,
                runSecret,
                allowCreate: flags.allowCreate,
                allowedHosts: flags.allowedHosts,
                trustProxy: flags.trustProxy,
                maxBatch: flags.maxBatch,
                maxConnections: flags.maxConnections,
                maxConnectionsPerAddress: flags.maxConnectionsPerAddress,
                maxTags: flags.maxTags,
                maxPipelined: flags.maxPipelined,
                maxStep: flags.maxStep,
                table: flags.table,
                schema: flags.schema,
                snowflakeGroup: flags.snowflakeGroup,
                shutdownTimeoutMs: flags.shutdownTimeout,
                target: describeTarget(self),
                // A hint in an HTTP answer names the command, never the database URL (not even redacted).
                adminCommand: programName(),
                ephemeral: embedded !== undefined && embedded.dir === undefined,
                // `idlease next` on this directory finds the server here and draws through it (the file is readable by its owner only).
                onListening: (url) =>
                  lock?.announce({
                    serve: {
                      url: reachable(url),
                      table: flags.table,
                      ...(runSecret ? { secret: runSecret } : {}),
                      maxBatch: flags.maxBatch ?? DEFAULT_MAX_BATCH,
                      ...(flags.schema ? { schema: flags.schema } : {}),
                    },
                  }),
                onStopping: () => lock?.announce({ serve: undefined }),
              });
            if (redisUrl === undefined) await serve(undefined);
            else await withRedis(self, redisUrl, serve, true);
          },
          { allowMemory: true },
        );
      },
    );
}

/** The token from --token, --token-file, $IDLEASE_TOKEN or $IDLEASE_TOKEN_FILE; an empty one is refused (an unset variable must not turn auth off). */
function serveToken(flags: { token?: string; tokenFile?: string }): string | undefined {
  const file = flags.tokenFile ?? (process.env.IDLEASE_TOKEN_FILE || undefined);
  let token: string | undefined;
  let from: string;
  if (flags.token !== undefined) [token, from] = [flags.token, '--token'];
  else if (file !== undefined) {
    from = `the token file ${file}`;
    try {
      token = readFileSync(file, 'utf8').replace(/\r?\n$/, '');
    } catch (cause) {
      throw new IdleaseError('BAD_CONFIG', `Cannot read ${from}: ${(cause as Error).message}.`, { cause });
    }
  } else [token, from] = [process.env.IDLEASE_TOKEN, '$IDLEASE_TOKEN'];
  if (token !== undefined && token.trim() === '')
    throw new IdleaseError('BAD_CONFIG', `${from} is empty (an unset variable?): give a real token, or none at all on a loopback address.`);
  return token;
}

const MIN_TOKEN_BYTES = 16;

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** A server listening on every address is reached on loopback. */
function reachable(url: string): string {
  const u = new URL(url);
  if (u.hostname === '0.0.0.0') u.hostname = '127.0.0.1';
  if (u.hostname === '[::]') u.hostname = '[::1]';
  return u.toString().replace(/\/$/, '');
}
