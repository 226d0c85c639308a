/**
 * Words for commands printed in hints, so that a hint runs when pasted into a POSIX shell: a
 * tag with a space or a quote (`my tag`, `o'brien`) stays one argument.
 */

/** A word the shell passes through as it is: single-quoted when it holds anything but plain URL characters (a redacted password's *** included). */
export function shellWord(word: string): string {
  return /^[\w@:/.%+=,-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}
