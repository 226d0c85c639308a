// Placeholder: the next_id() issue fills this in (PL/pgSQL function, sequence, layout).
import type { Flavor } from '../dialects/detect.js';
import type { IdleaseMigration } from './types.js';

export interface NextIdMigrateOptions {
  /** Schema that holds the sequence and next_id(). */
  schema?: string;
  /** Logical shard id stored in every ID. */
  shard?: number;
}

export type ResolvedNextId = Readonly<{ schema: string; shard: number }>;

export function resolveNextIdOptions(input: boolean | NextIdMigrateOptions | NextIdMigrateOptions[] | undefined): ResolvedNextId[] {
  if (input === undefined || input === false) return [];
  const list = input === true ? [{}] : Array.isArray(input) ? input : [input];
  return list.map((o) => Object.freeze({ schema: o.schema ?? 'public', shard: o.shard ?? 0 }));
}

export function nextIdMigrations(_flavor: Flavor, _opts: ResolvedNextId): IdleaseMigration[] {
  return [];
}
