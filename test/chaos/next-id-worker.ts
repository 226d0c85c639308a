/**
 * A chaos worker for next_id() (test/chaos/run.ts): 20-row INSERT … RETURNING into a table whose
 * id column is attached, on PostgreSQL or MariaDB, until the stop file appears; every ID it was
 * given goes to its file (test/helpers/id-file.ts). Failed inserts (the server killed or frozen)
 * are retried after a moment. Prints `first` at its first ID and one JSON line at the end.
 *
 *   node --import tsx test/chaos/next-id-worker.ts '<json config>'
 */
import { connect } from '../../src/connect.js';
import { withDeadline } from '../../src/runtime/deadline.js';
import { idFile } from '../helpers/id-file.js';
import { stopRequested } from '../helpers/stop-file.js';

interface Config {
  url: string;
  out: string;
  stopFile: string;
  table: string;
}
const cfg = JSON.parse(process.argv[2] ?? '{}') as Config;
const knex = connect(cfg.url, { poolMax: 1, connectTimeoutMs: 1_000 });
const mysql = /^(mysql|mariadb):/i.test(cfg.url);
const rows = Array.from({ length: 20 }, () => '(1)').join(',');
const sql = mysql
  ? `INSERT INTO ${cfg.table} (w) VALUES ${rows} RETURNING CAST(id AS CHAR) AS id`
  : `INSERT INTO ${cfg.table} (w) VALUES ${rows} RETURNING id::text AS id`;
const ids = idFile(cfg.out, 200);
let failed = 0;
for (let round = 0; !(round % 16 === 0 && stopRequested(cfg.stopFile)); round++) {
  try {
    const r = (await withDeadline(knex.raw(sql), 3_000, 'insert')) as unknown;
    const got = (mysql ? (r as [Array<{ id: string }>])[0] : (r as { rows: Array<{ id: string }> }).rows).map((x) => BigInt(x.id));
    if (ids.count === 0) process.stdout.write('first\n');
    for (const id of got) ids.put(id);
    await new Promise((res) => setTimeout(res, 2));
  } catch {
    failed++;
    await new Promise((res) => setTimeout(res, 50));
  }
}
ids.close();
await knex.destroy().catch(() => undefined);
process.stdout.write(JSON.stringify({ ids: ids.count, failed }) + '\n');
process.exit(0);
