/**
 * The Redis key of a tag: `<keyPrefix>{<tag>}`. The braces are a Redis Cluster hash tag: the slot
 * is computed from the tag alone, so every key idlease keeps for a tag lands in one slot (one
 * master) and the tags of a service spread over the masters, whatever the prefix. On a single
 * Redis or behind Sentinel the braces are just characters of the name.
 *
 * idlease 0.2 named the key `<keyPrefix><tag>`. A process of this version never reads that key: its
 * first call on the new name finds no key, is elected and leases a window from the database above
 * the row's max_id, which is above every window the old key was ever given, so the first window
 * after the rename is as safe as any other (the old key's unissued IDs are a gap).
 */
export function redisKeyName(keyPrefix: string, tag: string): string {
  return `${keyPrefix}{${tag}}`;
}

/** The name idlease 0.2 gave the key (`idlease redis status` mentions it when it is still there). */
export function legacyKeyName(keyPrefix: string, tag: string): string {
  return keyPrefix + tag;
}
