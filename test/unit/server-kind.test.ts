/**
 * The server is asked what it is (VERSION(), version()): MySQL behind mysql2 and CockroachDB,
 * YugabyteDB or Redshift behind pg are refused at migrate, naming what they are; the servers the
 * tests run on (their version strings as this machine's servers and PGlite print them) pass.
 */
import { describe, expect, it } from 'vitest';
import { untestedServer } from '../../src/dialects/server-kind.js';

describe('untestedServer', () => {
  it('passes MariaDB, PostgreSQL and PGlite as they print themselves', () => {
    expect(untestedServer('mysql', '10.11.19-MariaDB-0+deb12u1')).toBeUndefined();
    expect(untestedServer('mysql', '11.4.2-MariaDB-log')).toBeUndefined();
    expect(
      untestedServer('postgres', 'PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc 12.2.0, 64-bit'),
    ).toBeUndefined();
    expect(untestedServer('postgres', 'PostgreSQL 18.6 (PGlite 0.5.16) on wasm32-unknown-emscripten, 32-bit')).toBeUndefined();
    expect(untestedServer('pglite', 'PostgreSQL 18.6 (PGlite 0.5.16) on wasm32-unknown-emscripten, 32-bit')).toBeUndefined();
  });
  it('refuses MySQL and its forks behind mysql2, naming the version', () => {
    for (const v of ['8.4.3', '8.0.36-28', '8.0.35-0ubuntu0.22.04.1', '5.7.44-log']) {
      expect(untestedServer('mysql', v)).toMatch(new RegExp(`not MariaDB \\(VERSION\\(\\) says '${v.replace(/\./g, '\\.')}'`));
    }
  });
  it('refuses PostgreSQL-compatible servers behind pg', () => {
    for (const v of [
      'CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)',
      'PostgreSQL 11.2-YB-2.20.1.0-b0 on x86_64-pc-linux-gnu, compiled by clang version 15.0.7',
      'PostgreSQL 8.0.2 on i686-pc-linux-gnu, compiled by GCC gcc (GCC) 3.4.2 20041017 (Red Hat 3.4.2-6.fc3), Redshift 1.0.77467',
    ]) {
      expect(untestedServer('postgres', v)).toMatch(/not PostgreSQL/);
    }
  });
});
