/**
 * The chaos run's checker: what the workers recorded, judged against what each mechanism promises.
 * A stream is one process's IDs in the order it was given them; streams of one space are every
 * process that draws from the same sequence (a tag on one database, a worker table, a Redis tag).
 *  - repeats: an ID recorded twice in a space, by any processes (the product's one promise);
 *  - order: a process's IDs not strictly increasing (segments, snowflake and the Redis sequence
 *    all promise it per process).
 * Pure over the streams given; readStream reads a worker's file.
 */
import { readFileSync } from 'node:fs';

export interface Stream {
  readonly space: string;
  readonly name: string;
  readonly ids: BigInt64Array;
}

export interface SpaceReport {
  readonly space: string;
  readonly ids: number;
  readonly repeats: number;
  /** Streams whose IDs do not strictly increase, with the first place they do not. */
  readonly orderViolations: string[];
  /** A few of the repeated IDs, for the report. */
  readonly examples: string[];
}

export function readStream(space: string, name: string, file: string): Stream {
  const b = readFileSync(file);
  return { space, name, ids: new BigInt64Array(b.buffer.slice(b.byteOffset, b.byteOffset + Math.floor(b.length / 8) * 8)) };
}

export function checkStreams(streams: readonly Stream[]): SpaceReport[] {
  const spaces = new Map<string, Stream[]>();
  for (const s of streams) spaces.set(s.space, [...(spaces.get(s.space) ?? []), s]);
  const reports: SpaceReport[] = [];
  for (const [space, members] of spaces) {
    const orderViolations: string[] = [];
    let total = 0;
    for (const s of members) {
      total += s.ids.length;
      for (let i = 1; i < s.ids.length; i++)
        if (s.ids[i]! <= s.ids[i - 1]!) {
          orderViolations.push(`${s.name}: #${i} ${s.ids[i]} after ${s.ids[i - 1]}`);
          break;
        }
    }
    const all = new BigInt64Array(total);
    let at = 0;
    for (const s of members) {
      all.set(s.ids, at);
      at += s.ids.length;
    }
    all.sort();
    let repeats = 0;
    const examples: string[] = [];
    for (let i = 1; i < all.length; i++)
      if (all[i] === all[i - 1]) {
        repeats++;
        if (examples.length < 5) examples.push(String(all[i]));
      }
    reports.push({ space, ids: total, repeats, orderViolations, examples });
  }
  return reports;
}
