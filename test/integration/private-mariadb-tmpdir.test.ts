/**
 * A private mariadbd keeps its temporary files to itself. At start-up mariadbd deletes every
 * `#sql*` file in its tmpdir as leftovers of its own last run; with the default tmpdir (/tmp,
 * shared by every MariaDB here) those were the live temporary tables of the shared server, and a
 * query on it failed "Error on delete of '/tmp/#sql-temptable-….MAI' (Errcode: 2)" in a
 * fresh-clone CI while another test started a private server.
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import mysql from 'mysql2/promise';
import { afterAll, expect, it } from 'vitest';
import { startMariadb, type ServerInstance } from '../helpers/servers.js';

let server: ServerInstance | undefined;
const probe = path.join(tmpdir(), `#sql-temptable-idlease-probe-${process.pid}.MAI`);

afterAll(async () => {
  rmSync(probe, { force: true });
  await server?.destroy();
});

it('a private MariaDB that starts and restarts leaves the #sql files of the other servers in the shared tmpdir alone', async () => {
  writeFileSync(probe, '');
  server = await startMariadb();
  expect(existsSync(probe), `${probe} deleted by the private server's start`).toBe(true);
  await server.stop();
  await server.start();
  expect(existsSync(probe), `${probe} deleted by the private server's restart`).toBe(true);

  const conn = await mysql.createConnection(server.url);
  try {
    const [rows] = await conn.query<mysql.RowDataPacket[]>('SELECT @@tmpdir AS tmpdir');
    expect(path.resolve(String(rows[0]!.tmpdir))).not.toBe(path.resolve(tmpdir()));
  } finally {
    await conn.end();
  }
});
