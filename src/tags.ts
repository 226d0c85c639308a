/**
 * What a tag may be, the same on every engine: a tag names one row, and two tags that look the
 * same must not name two rows on one engine and one row on another. PostgreSQL compares text
 * byte for byte; MariaDB's utf8mb4_bin pads trailing spaces ('order ' = 'order'), so the segment
 * table's tag column is NO PAD binary there (migrations/20261127000002). What no collation can
 * settle is refused before any statement runs, so every engine sees the same tags:
 * - leading or trailing whitespace, and any whitespace other than the plain space;
 * - control characters, format and other invisible characters (zero-width spaces and joiners,
 *   the BOM, soft hyphens, bidi marks, Hangul fillers: Unicode's Default_Ignorable_Code_Point);
 * - text not in Unicode normal form C ('é' as e + combining accent): the message names the
 *   NFC spelling, which is the one to use.
 * - letters from more than one script, the way look-alikes are made (`оrder` with a Cyrillic о
 *   is not `order`): the mixes a real name uses stay allowed, as in Unicode's "highly
 *   restrictive" level (UTS #39): Latin with Han and Japanese kana, with Han and Bopomofo, or
 *   with Han and Hangul. Digits, punctuation and marks belong to no script here.
 * A tag written wholly in another script that happens to look like a Latin word (Cyrillic
 * `сор`) is a different name, as it is anywhere else, and stays a different tag.
 */

/** The longest tag, in UTF-16 code units (the tag columns are 128 characters wide). */
export const MAX_TAG_LENGTH = 128;

const INVISIBLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}]/u;
const OTHER_SPACE = /[^\S ]/u;

/** The scripts a letter can be told apart by (anything else counts as one script, 'Other'). */
const SCRIPTS = [
  'Latin',
  'Greek',
  'Cyrillic',
  'Armenian',
  'Hebrew',
  'Arabic',
  'Devanagari',
  'Bengali',
  'Thai',
  'Georgian',
  'Hangul',
  'Han',
  'Hiragana',
  'Katakana',
  'Bopomofo',
] as const;
const SCRIPT_TESTS = SCRIPTS.map((name) => [name, new RegExp(`\\p{Script=${name}}`, 'u')] as const);
/** Mixes of scripts one name may use (UTS #39, highly restrictive); a single script always may. */
const ALLOWED_MIXES: ReadonlyArray<ReadonlySet<string>> = [
  new Set(['Latin', 'Han', 'Hiragana', 'Katakana']),
  new Set(['Latin', 'Han', 'Bopomofo']),
  new Set(['Latin', 'Han', 'Hangul']),
];

function scriptsOf(tag: string): Map<string, string> {
  const found = new Map<string, string>(); // script → its first letter
  for (const ch of tag) {
    if (!/\p{L}/u.test(ch)) continue;
    const script = SCRIPT_TESTS.find(([, re]) => re.test(ch))?.[0] ?? 'Other';
    if (!found.has(script)) found.set(script, ch);
  }
  return found;
}

/** Code points as U+XXXX, for a message that must show what cannot be seen. */
function codePoints(text: string): string {
  return [...text].map((c) => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`).join(' ');
}

/** What is wrong with `tag` as a tag (a phrase after "the tag …"), or undefined when it is fine. */
export function tagProblem(tag: string): string | undefined {
  if (tag.length < 1 || tag.length > MAX_TAG_LENGTH) return `must be 1 to ${MAX_TAG_LENGTH} characters long, got ${tag.length}`;
  const invisible = INVISIBLE.exec(tag);
  if (invisible) return `holds an invisible or control character (${codePoints(invisible[0])}); tags are printable text without them`;
  if (/^\s|\s$/u.test(tag)) return 'starts or ends with whitespace; tags have none there (trim it)';
  const space = OTHER_SPACE.exec(tag);
  if (space) return `holds whitespace other than a plain space (${codePoints(space[0])})`;
  const nfc = tag.normalize('NFC');
  if (nfc !== tag) return `is not in Unicode normal form C (composed characters): write it as ${JSON.stringify(nfc)} (${codePoints(nfc)})`;
  const scripts = scriptsOf(tag);
  if (scripts.size > 1 && !ALLOWED_MIXES.some((mix) => [...scripts.keys()].every((k) => mix.has(k)))) {
    const letters = [...scripts].map(([script, ch]) => `${script} ${JSON.stringify(ch)} (${codePoints(ch)})`).join(', ');
    return `mixes letters of several scripts (${letters}), the way look-alike names are made; write it in one script`;
  }
  return undefined;
}
