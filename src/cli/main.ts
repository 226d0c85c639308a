import { Command, CommanderError } from 'commander';
import { preloadPGlite } from '../embedded/preload.js';
import { errorCategory, IdleaseError } from '../errors.js';
import { shellWord } from '../shell.js';
import { DEFAULT_PGLITE_DIR, redact } from '../urls.js';
import { lockSecondsArg, programName, resolveUrl, secondsArg, type UrlSource } from './context.js';
import { packageVersion } from './version.js';

/**
 * Each command's module, loaded only when the command runs: the modules import what their
 * commands need (knex, mysql2, pg, prom-client, pino, node:http), and `idlease next` on the
 * embedded database needs none of it. Listed in the order `idlease --help` shows them.
 */
const COMMAND_MODULES: ReadonlyArray<readonly [names: readonly string[], register: (program: Command) => Promise<void>]> = [
  [
    ['migrate'],
    async (program) => {
      const [{ registerMigrate }, { ticketMigrateFlags }, { nextIdMigrateFlags }] = await Promise.all([
        import('./migrate.js'),
        import('./tickets.js'),
        import('./next-id.js'),
      ]);
      registerMigrate(program, [ticketMigrateFlags, nextIdMigrateFlags]);
    },
  ],
  [['next', 'tag'], async (program) => (await import('./segment.js')).registerSegmentCommands(program)],
  [['tickets'], async (program) => (await import('./tickets.js')).registerTicketCommands(program)],
  [['decode'], async (program) => (await import('./next-id.js')).registerNextIdCommands(program)],
  [['next-id'], async (program) => (await import('./next-id.js')).registerNextIdAdminCommands(program)],
  [['serve'], async (program) => (await import('./serve.js')).registerServeCommand(program)],
  [['snowflake', 'workers'], async (program) => (await import('./snowflake.js')).registerSnowflakeCommands(program)],
  [['redis'], async (program) => (await import('./redis.js')).registerRedisCommands(program)],
  [['dashboard'], async (program) => (await import('./dashboard.js')).registerDashboardCommand(program)],
];

/** Root options that take a value: the word after them is not the command. */
const VALUE_OPTIONS = new Set(['--url', '--wait', '--lock-wait']);

/** The --url argv gives (`--url x` or `--url=x`), else $IDLEASE_URL, else $DATABASE_URL: a guess for the preload, never an error. */
function urlOf(argv: readonly string[]): string | undefined {
  for (let i = argv.length - 1; i >= 0; i--) {
    if (argv[i] === '--url') return argv[i + 1];
    if (argv[i]!.startsWith('--url=')) return argv[i]!.slice('--url='.length);
  }
  return process.env.IDLEASE_URL ?? process.env.DATABASE_URL;
}

/** The command argv names (its first word that is neither an option nor an option's value), if any. */
export function commandName(argv: readonly string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return argv[i + 1];
    if (VALUE_OPTIONS.has(arg)) i++;
    else if (!arg.startsWith('-')) return arg;
  }
  return undefined;
}

/**
 * The command `argv` stops at when that command only groups others (`idlease`, `idlease tag`,
 * `idlease tickets`): commander would print its help on stderr and fail with "(outputHelp)".
 * Undefined when argv asks for help or the version, or names more than a group.
 */
function bareGroup(program: Command, argv: readonly string[]): Command | undefined {
  let cmd = program;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') return undefined;
    if (cmd === program && VALUE_OPTIONS.has(arg)) {
      i++;
      continue;
    }
    if (arg.startsWith('-')) {
      if (/^(-h|--help|-V|--version)$/.test(arg)) return undefined;
      continue;
    }
    const sub = cmd.commands.find((c) => c.name() === arg || c.aliases().includes(arg));
    if (sub === undefined) return undefined;
    cmd = sub;
  }
  return cmd.commands.length > 0 ? cmd : undefined;
}

/**
 * The program with the commands `argv` can reach: only its command's module when it names a
 * known one, every module otherwise (help, a typo that commander answers with the list).
 */
export async function buildProgram(argv?: readonly string[]): Promise<Command> {
  const program = new Command('idlease')
    .description('Unique 64-bit IDs from the MySQL/MariaDB and PostgreSQL you already run.')
    .option(
      '--url <url>',
      'database: mysql://…, mariadb://…, postgres://…, pglite:<dir> (default: $IDLEASE_URL, else $DATABASE_URL, else embedded PGlite in ./.idlease/)',
    )
    .option('--json', 'machine-readable output (IDs as strings)')
    .option('--verbose', "on failure, also print the error's causes and the database driver's log lines")
    .option(
      '--wait <seconds>',
      'how long to wait for a database that does not answer before failing with DB_UNAVAILABLE (default 5)',
      secondsArg,
    )
    .option(
      '--lock-wait <seconds>',
      'embedded (PGlite) database only: how long to wait while another process has it open, before DB_LOCKED (default 10; 0 tries once)',
      lockSecondsArg,
    )
    .version(packageVersion(), '-V, --version', "print idlease's version")
    .exitOverride();
  // Every error is one line `idlease: CODE: message`, commander's own parse errors included;
  // subcommands inherit this (copyInheritedSettings), so it holds for `idlease tickets next -n 0` too.
  program.configureOutput({
    outputError: (str, write) => {
      shownErrors.add(program);
      write(parseErrorLine(str));
    },
  });
  const name = argv === undefined ? undefined : commandName(argv);
  const wanted = COMMAND_MODULES.filter(([names]) => name !== undefined && names.includes(name));
  for (const [, register] of wanted.length > 0 ? wanted : COMMAND_MODULES) await register(program);
  program.addHelpText(
    'after',
    `
Examples:
  idlease migrate                      create the embedded database and the segment table
  idlease tag add order                add a segment tag
  idlease next order -n 5              five IDs for tag "order"
  idlease --url mysql://root@127.0.0.1:3306/app next order --json`,
  );
  return program;
}

/** Run the CLI; returns the exit code (0 ok, 1 runtime failure, 2 bad input). */
export async function main(argv: string[]): Promise<number> {
  // `next` on an embedded directory spends most of its time starting PGlite: compile its WASM
  // while the command's code loads. Only a guess (commander decides what runs); the directory
  // is opened later, under its lock.
  const url = urlOf(argv);
  if (commandName(argv) === 'next' && (url === undefined || (url.startsWith('pglite:') && url !== 'pglite:memory'))) preloadPGlite();
  let program: Command;
  try {
    program = await buildProgram(argv);
  } catch (err) {
    process.stderr.write(`idlease: INTERNAL: ${oneLine((err as Error)?.message ?? String(err))} (rerun with --verbose and report it)\n`);
    if (argv.includes('--verbose')) printCauses(err);
    return 1;
  }
  const group = bareGroup(program, argv);
  if (group !== undefined) {
    // `idlease`, `idlease tag`: a command that needs one more word. As git and npm do, its help
    // on stdout and a failing status (2: complete the command and rerun), nothing else.
    group.outputHelp();
    return 2;
  }
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version exit 0. Parse errors were printed by outputError; an argument
      // parser that throws inside an action (`tag set-step x 0`) was not.
      if (err.exitCode === 0) return 0;
      if (!shownErrors.has(program)) process.stderr.write(parseErrorLine(err.message));
      return 2;
    }
    const verbose = argv.includes('--verbose');
    if (err instanceof IdleaseError) {
      process.stderr.write(`idlease: ${err.code}: ${oneLine(cliMessage(err, program.opts<{ url?: string }>().url))}\n`);
      if (verbose) printCauses(err);
      // Input and setup errors (fix and rerun) exit 2; a database that did not answer or a refused value exit 1.
      return exitCodeOf(err);
    }
    process.stderr.write(`idlease: INTERNAL: ${oneLine((err as Error)?.message ?? String(err))} (rerun with --verbose and report it)\n`);
    if (verbose) printCauses(err);
    return 1;
  }
}

/**
 * The message a CLI user reads: the error's CLI wording when it has one, with `{idlease}`
 * replaced by the command that reaches the same database — the user's --url (password
 * redacted), or the same environment variable — so a hint runs as printed. When the URL came
 * from $IDLEASE_URL or $DATABASE_URL, the message says which.
 */
export function cliMessage(err: IdleaseError, url: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  let source: UrlSource | undefined;
  try {
    source = resolveUrl(url, env).source;
  } catch {
    source = undefined; // an empty variable: that error is the one being printed
  }
  const fromEnv = source === 'IDLEASE_URL' || source === 'DATABASE_URL' ? source : undefined;
  const program = programName(env);
  if (err.cli === undefined) {
    // A library message that names a command (`idlease tag add x`, "CLI: idlease migrate") names
    // it as the user ran it: npx or not, with their --url, so that it runs as printed.
    const invocation = url !== undefined && source === '--url' ? `${program} --url ${shellWord(redact(url))}` : program;
    const message = err.message.replace(LIBRARY_COMMAND, (_, lead: string) => `${lead}${invocation} `);
    return fromEnv !== undefined && err.code !== 'BAD_ARGUMENT' && !message.includes(`$${fromEnv}`)
      ? `${message} (database URL from $${fromEnv})`
      : message;
  }
  // A hint for the embedded default itself (tickets names it pglite:<dir>) needs no --url when the user gave none.
  const ownDefault = err.cli.url === `pglite:${DEFAULT_PGLITE_DIR}` && source === undefined;
  const target = ownDefault ? undefined : (err.cli.url ?? (url !== undefined ? redact(url) : undefined));
  const text = err.cli.message.replaceAll('{idlease}', target === undefined ? program : `${program} --url ${shellWord(target)}`);
  if (fromEnv === undefined || (err.cli.url !== undefined && !ownDefault)) return text;
  return text !== err.cli.message
    ? `${text} (The database is the one $${fromEnv} names, as for this command.)`
    : `${text} (database URL from $${fromEnv})`;
}

/** `idlease <command>` as library messages quote it: after a backtick or "CLI: ", before a command name. */
const LIBRARY_COMMAND = /(`|CLI: )idlease (?=(?:migrate|next|tag|tickets|decode|next-id|serve|snowflake|workers|redis)\b)/g;

/** The exit code for an error code: ERROR_CATEGORIES decides (client/config → 2, else 1). */
export function exitCodeOf(err: IdleaseError): number {
  const category = errorCategory(err);
  return category === 'client' || category === 'config' ? 2 : 1;
}

/** Programs whose parse error commander has already printed through outputError. */
const shownErrors = new WeakSet<Command>();

function parseErrorLine(commanderMessage: string): string {
  return `idlease: BAD_ARGUMENT: ${oneLine(withoutSecrets(commanderMessage.replace(/^error: /, '')))} (see idlease --help)\n`;
}

/**
 * commander quotes what it did not understand: `unknown option '--urll=postgres://u:pw@h/db'`.
 * The value of an unknown `--name=value` is never shown (its name is enough to fix a typo, and
 * it may be a URL or a token), and any other URL it quotes (an unknown command) is redacted.
 */
export function withoutSecrets(message: string): string {
  return message.replace(/('-{1,2}[\w-]+)=.*?'(?=\s*(\(|$))/s, "$1=…'").replace(/[a-z][a-z0-9+.-]*:\/\/[^\s']*/gi, (url) => redact(url));
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

function printCauses(err: unknown): void {
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    process.stderr.write(`${depth === 0 ? '' : 'caused by: '}${(e as Error)?.stack ?? String(e)}\n`);
  }
}
