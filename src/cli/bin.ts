import { setFlagsFromString } from 'node:v8';
import { commandName, main } from './main.js';

// A command that opens the embedded database and exits (`next`, `tag`, `migrate` …) spends most
// of its CPU optimizing PGlite's WebAssembly for a run that is over in a second: V8 compiles it
// at once with its baseline compiler (Liftoff) and then again, function by function, with its
// optimizing one. Baseline only: `idlease next order` on the embedded default took 0.96 s and
// 1.1 CPU-seconds instead of 1.56 s and 2.4 (this machine). The long-running commands keep the
// optimized code. Set here, in the CLI's own process, before any WebAssembly is compiled; never
// in the library, whose host process is the user's.
const LONG_RUNNING = new Set(['serve', 'dashboard']);
const argv = process.argv.slice(2);
if (!LONG_RUNNING.has(commandName(argv) ?? '')) setFlagsFromString('--liftoff-only');

// `idlease next order -n 1000000 | head -1`: the reader went away. Stop quietly, as Unix tools
// do on SIGPIPE (status 128 + 13), instead of an unhandled EPIPE stack trace. The IDs already
// leased are committed, so at worst they are skipped, never handed out again.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(141);
  throw err;
});

const code = await main(argv);
process.exitCode = code;
// A failed command has closed what it opened; what may still hold the event loop is a driver's
// connection attempt that cannot be cancelled (mysql2 waiting for a greeting that a server of
// another kind never sends). Exit once stdout and stderr are flushed, not when it times out.
if (code !== 0) process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
