/**
 * A library user on the embedded directory of its working directory: connect('pglite:.idlease/pglite'), draw, close.
 * Prints the IDs one per line; a typed failure is one line `CODE: message` on stderr, exit 1.
 */
import { connect, createSegmentAllocator, isIdleaseError, migrate } from '../../src/index.js';

const [count = '10', lockTimeoutMs = '30000'] = process.argv.slice(2);
const knex = connect('pglite:.idlease/pglite', { lockTimeoutMs: Number(lockTimeoutMs) });
try {
  await migrate(knex);
  const alloc = createSegmentAllocator({ knex, tag: 'order', create: true });
  const ids = await alloc.nextBatch(Number(count));
  await alloc.close();
  process.stdout.write(ids.join('\n') + '\n');
} catch (err) {
  process.stderr.write(isIdleaseError(err) ? `${err.code}: ${err.message}\n` : `UNTYPED: ${String((err as Error)?.stack ?? err)}\n`);
  process.exitCode = 1;
} finally {
  await knex.destroy();
}
