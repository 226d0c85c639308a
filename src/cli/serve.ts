/** `idlease serve`: flags only; the server lives in src/serve/. */
import { InvalidArgumentError, type Command } from 'commander';
import { pgliteTarget } from '../connect.js';
import { migrate } from '../migrations/migrate.js';
import { listTags } from '../segment/admin.js';
import { runServe } from '../serve/run.js';
import { shellWord } from '../shell.js';
import { redact } from '../urls.js';
import { describeTarget, positiveInt, programName, targetUrl, withKnex } from './context.js';
import { withRedis } from './redis.js';

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
    .option('--token <token>', 'require Authorization: Bearer <token> on /api and /v1 (default: $IDLEASE_TOKEN)')
    .option('--protect-metrics', 'require the token on /metrics too')
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
      'also serve Redis sequences of the served tags (/api/redis/get/{tag}, /v1/redis/{tag}/ids; needs the redis package): redis://…',
    )
    .option('--shutdown-timeout <ms>', 'how long SIGTERM waits for requests in flight', positiveInt('--shutdown-timeout'), 10_000)
    .addHelpText(
      'after',
      `
Tags are never created over HTTP: add them with \`idlease tag add <tag>\`. On the embedded
database (no --url) the table is created on first use. Logs are JSON lines on stderr; the
URL it listens on is printed on stdout. SIGTERM/SIGINT: finish requests in flight, give the
unused part of each lease back, exit 0; a second signal exits at once.`,
    )
    .action(
      async (
        flags: {
          host: string;
          port: number;
          tags?: string[];
          token?: string;
          protectMetrics?: boolean;
          maxStep?: number;
          table: string;
          schema?: string;
          snowflakeGroup: string;
          shutdownTimeout: number;
          redisUrl?: string;
        },
        self: Command,
      ) => {
        const embedded = pgliteTarget(targetUrl(self));
        const token = flags.token ?? (process.env.IDLEASE_TOKEN || undefined);
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
                protectMetrics: flags.protectMetrics,
                maxStep: flags.maxStep,
                table: flags.table,
                schema: flags.schema,
                snowflakeGroup: flags.snowflakeGroup,
                shutdownTimeoutMs: flags.shutdownTimeout,
                target: describeTarget(self),
                createTags: embedded !== undefined,
                adminCommand: adminCommand(self),
                ephemeral: embedded !== undefined && embedded.dir === undefined,
                // `idlease next` on this directory finds the server here and draws through it (the file is readable by its owner only).
                onListening: (url) =>
                  lock?.announce({
                    serve: {
                      url: reachable(url),
                      table: flags.table,
                      ...(token ? { token } : {}),
                      ...(flags.schema ? { schema: flags.schema } : {}),
                    },
                  }),
                onStopping: () => lock?.announce({ serve: undefined }),
              });
            if (flags.redisUrl === undefined) await serve(undefined);
            else await withRedis(self, flags.redisUrl, serve, true);
          },
          { allowMemory: true },
        );
      },
    );
}

/** The command a hint in an HTTP answer gives for tag admin on the served database: its URL, password redacted. */
function adminCommand(cmd: Command): string {
  const url = targetUrl(cmd);
  return url === undefined ? programName() : `${programName()} --url ${shellWord(redact(url))}`;
}

/** A server listening on every address is reached on loopback. */
function reachable(url: string): string {
  const u = new URL(url);
  if (u.hostname === '0.0.0.0') u.hostname = '127.0.0.1';
  if (u.hostname === '[::]') u.hostname = '[::1]';
  return u.toString().replace(/\/$/, '');
}
