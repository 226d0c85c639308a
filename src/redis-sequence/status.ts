import { redisCommander } from './client.js';
import { redisKeyName } from './keys.js';
import { RedisKey, type KeyStatus } from './redis-store.js';

export type { KeyStatus };

/** What the tag's key holds and whether this Redis incarnation installed it (`idlease redis status`). Read-only: never resets a stale key. */
export function redisKeyStatus(redis: unknown, tag: string, options: { keyPrefix?: string; timeoutMs?: number } = {}): Promise<KeyStatus> {
  return new RedisKey(redisCommander(redis), redisKeyName(options.keyPrefix ?? 'idlease:seq:', tag), options.timeoutMs ?? 5_000).status();
}
