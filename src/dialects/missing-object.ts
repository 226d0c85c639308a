/**
 * "The table (or sequence) idlease needs is not there": the one test both dialect files use
 * to turn a driver error into NOT_MIGRATED. Narrow on purpose: a bare "does not exist" also
 * matches PostgreSQL's unknown database (3D000), which is a connection problem, not a
 * migration to run.
 */
export function isMissingTable(err: unknown): boolean {
  const e = err as { code?: unknown; errno?: unknown; message?: unknown } | null;
  if (e === null || typeof e !== 'object') return false;
  // 42P01 undefined_table (Postgres and PGlite; a missing sequence in nextval() too); 1146 ER_NO_SUCH_TABLE.
  if (e.code === '42P01' || e.code === 'ER_NO_SUCH_TABLE' || e.errno === 1146) return true;
  return /relation "?[^"]*"? does not exist|Table '[^']*' doesn't exist/i.test(String(e.message));
}
