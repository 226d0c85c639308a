import { main } from './main.js';

// `idlease next order -n 1000000 | head -1`: the reader went away. Stop quietly, as Unix tools
// do on SIGPIPE (status 128 + 13), instead of an unhandled EPIPE stack trace. The IDs already
// leased are committed, so at worst they are skipped, never handed out again.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(141);
  throw err;
});

const code = await main(process.argv.slice(2));
process.exitCode = code;
// A failed command has closed what it opened; what may still hold the event loop is a driver's
// connection attempt that cannot be cancelled (mysql2 waiting for a greeting that a server of
// another kind never sends). Exit once stdout and stderr are flushed, not when it times out.
if (code !== 0) process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
