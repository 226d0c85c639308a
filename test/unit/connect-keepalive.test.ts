/** connect()'s TCP keepalive default, off switch and check, read from the config it builds (no driver loaded). */
import { describe, expect, it } from 'vitest';
import { DEFAULT_KEEPALIVE_MS, knexConfig } from '../../src/connect.js';

const connection = (url: string, keepAliveMs?: number) =>
  knexConfig(url, keepAliveMs === undefined ? {} : { keepAliveMs }).connection as Record<string, unknown>;

describe('connect(): TCP keepalive on server connections', () => {
  it('is on by default, first probe after 10 s idle (pg keepAlive, mysql2 enableKeepAlive)', () => {
    expect(DEFAULT_KEEPALIVE_MS).toBe(10_000);
    expect(connection('postgres://u@h/db')).toMatchObject({ keepAlive: true, keepAliveInitialDelayMillis: 10_000 });
    expect(connection('mysql://u@h/db')).toMatchObject({ enableKeepAlive: true, keepAliveInitialDelay: 10_000 });
  });
  it('takes keepAliveMs, and 0 turns it off', () => {
    expect(connection('postgresql://u@h/db', 3_000)).toMatchObject({ keepAlive: true, keepAliveInitialDelayMillis: 3_000 });
    expect(connection('mariadb://u@h/db', 0)).toMatchObject({ enableKeepAlive: false });
    expect(connection('postgres://u@h/db', 0)).toMatchObject({ keepAlive: false });
    expect(connection('postgres://u@h/db', 0)).not.toHaveProperty('keepAliveInitialDelayMillis');
  });
  it('refuses a negative or fractional value', () => {
    expect(() => connection('postgres://u@h/db', -1)).toThrow(/keepAliveMs/);
    expect(() => connection('mysql://u@h/db', 1.5)).toThrow(expect.objectContaining({ code: 'BAD_CONFIG' }));
  });
});
