import type { Knex } from 'knex';

/**
 * A next_id() table's audit on PostgreSQL or PGlite: rows, distinct ids, and ids not above their
 * predecessor in generation order (per session `s`, by `x`; tables without `s` pass `byX`).
 */
export async function auditNextIdTable(
  knex: Knex,
  name: string,
  partition: 'by session' | 'byX' = 'by session',
): Promise<{ rows: number; distinct: number; notIncreasing: number }> {
  const window = partition === 'by session' ? 'PARTITION BY s ORDER BY x' : 'ORDER BY x';
  const res = await knex.raw(
    `SELECT (SELECT count(*) FROM ${name})::int AS rows,
            (SELECT count(DISTINCT id) FROM ${name})::int AS distinct_ids,
            (SELECT count(*) FROM (SELECT id <= lag(id) OVER (${window}) AS bad FROM ${name}) q WHERE bad)::int AS not_increasing`,
  );
  const r = res.rows[0];
  return { rows: r.rows, distinct: r.distinct_ids, notIncreasing: r.not_increasing };
}
