/**
 * "The table (or sequence) idlease needs is not there": the one test both dialect files use
 * to turn a driver error into NOT_MIGRATED. Narrow on purpose: a bare "does not exist" also
 * matches PostgreSQL's unknown database (3D000), which is a connection problem, not a
 * migration to run.
 */
export function isMissingTable(err: unknown): boolean {
  const e = err as { code?: unknown; errno?: unknown; message?: unknown } | null;
  if (e === null || typeof e !== 'object') return false;
  // 42P01 undefined_table (Postgres and PGlite; a missing sequence in nextval() too); 3F000
  // invalid_schema_name: idlease's own schema is created by migrate, so its absence means the
  // same thing; 1146 ER_NO_SUCH_TABLE.
  if (e.code === '42P01' || e.code === '3F000' || e.code === 'ER_NO_SUCH_TABLE' || e.errno === 1146) return true;
  return /relation "?[^"]*"? does not exist|schema "[^"]*" does not exist|Table '[^']*' doesn't exist/i.test(String(e.message));
}

/**
 * Said with every NOT_MIGRATED on PostgreSQL: a database migrated by idlease 0.1 has the tables
 * in the search path (usually public), where today's default no longer looks. The allocator
 * must not create them there or here (a fresh segment table would reissue IDs), so it names
 * the two ways forward.
 */
export function legacyLayoutHint(isPostgres: boolean): string {
  return isPostgres
    ? " If an older idlease installed its tables in the search path (public), that migrate moves them into idlease's schema; to keep them where they are, pass schema: 'public' (CLI --schema public) everywhere instead."
    : '';
}
