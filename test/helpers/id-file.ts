/**
 * What a stress worker process writes: every ID it got, as int64 little endian, flushed every
 * `flushEvery` IDs so that a SIGKILL loses at most the unflushed tail, with `progress <n>` on
 * stdout after each flush for the parent to pace its faults on.
 */
import { closeSync, openSync, writeSync } from 'node:fs';

export interface IdFile {
  put(id: bigint): void;
  readonly count: number;
  close(): void;
}

export function idFile(path: string, flushEvery: number): IdFile {
  const fd = openSync(path, 'w');
  const buf = new BigInt64Array(flushEvery);
  let n = 0;
  let count = 0;
  return {
    put(id: bigint) {
      buf[n++] = id;
      count++;
      if (n === buf.length) {
        writeSync(fd, new Uint8Array(buf.buffer, 0, n * 8));
        n = 0;
        process.stdout.write(`progress ${count}\n`);
      }
    },
    get count() {
      return count;
    },
    close() {
      writeSync(fd, new Uint8Array(buf.buffer, 0, n * 8));
      closeSync(fd);
    },
  };
}
