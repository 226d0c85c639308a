import { Command, CommanderError } from 'commander';
import { errorCategory, IdleaseError } from '../errors.js';
import { registerMigrate, type MigrateFlagContributor } from './migrate.js';
import { registerSegmentCommands } from './segment.js';
import { registerTicketCommands, ticketMigrateFlags } from './tickets.js';
import { nextIdMigrateFlags, registerNextIdCommands } from './next-id.js';
import { registerServeCommand } from './serve.js';
import { registerSnowflakeCommands } from './snowflake.js';

export function buildProgram(): Command {
  const program = new Command('idlease')
    .description('Unique 64-bit IDs from the MySQL/MariaDB and PostgreSQL you already run.')
    .option('--url <url>', 'database: mysql://…, mariadb://…, postgres://…, pglite:<dir> (default: $IDLEASE_URL, else embedded PGlite in ./.idlease/)')
    .option('--json', 'machine-readable output (IDs as strings)')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();
  const contributors: MigrateFlagContributor[] = [ticketMigrateFlags, nextIdMigrateFlags];
  registerMigrate(program, contributors);
  registerSegmentCommands(program);
  registerTicketCommands(program);
  registerNextIdCommands(program);
  registerServeCommand(program);
  registerSnowflakeCommands(program);
  program.addHelpText('after', `
Examples:
  idlease migrate                      create the embedded database and the segment table
  idlease tag add order                add a segment tag
  idlease next order -n 5              five IDs for tag "order"
  idlease --url mysql://root@127.0.0.1:3306/app next order --json`);
  return program;
}

/** Run the CLI; returns the exit code (0 ok, 1 runtime failure, 2 bad input). */
export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander already printed usage or the error line; help and version exit 0.
      return err.exitCode === 0 ? 0 : 2;
    }
    if (err instanceof IdleaseError) {
      process.stderr.write(`idlease: ${err.code}: ${err.message}\n`);
      // Input and setup errors (fix and rerun) exit 2; a database that did not answer or a refused value exit 1.
      const category = errorCategory(err);
      return category === 'client' || category === 'config' ? 2 : 1;
    }
    process.stderr.write(`idlease: ${(err as Error)?.message ?? String(err)}\n`);
    return 1;
  }
}
