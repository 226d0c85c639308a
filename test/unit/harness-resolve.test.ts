import { describe, expect, it } from 'vitest';
import { resolveDatabases, type ResolveDeps } from '../helpers/global-setup.js';

function deps(over: Partial<ResolveDeps>): ResolveDeps {
  return {
    env: {},
    probe: async () => 'connect ECONNREFUSED',
    dockerAvailable: async () => false,
    startContainers: async () => {
      throw new Error('no containers expected');
    },
    ...over,
  };
}

describe('test database resolution', () => {
  it('fails with all three ways named when nothing is reachable and there is no Docker', async () => {
    const err = await resolveDatabases(deps({})).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    const msg = (err as Error).message;
    expect(msg).toContain('IDLEASE_TEST_MYSQL_URL');
    expect(msg).toContain('IDLEASE_TEST_PG_URL');
    expect(msg).toContain('npm run db:up');
    expect(msg).toContain('Docker');
    expect(msg).toContain('127.0.0.1:3306');
    expect(msg).toContain('127.0.0.1:5432');
  });

  it('prefers env URLs and refuses an env URL that does not answer', async () => {
    const env = { IDLEASE_TEST_MYSQL_URL: 'mysql://u:secret@db:3306/x', IDLEASE_TEST_PG_URL: 'postgres://p@db/x' };
    const ok = await resolveDatabases(deps({ env, probe: async () => undefined }));
    expect(ok.mysqlUrl).toBe(env.IDLEASE_TEST_MYSQL_URL);
    expect(ok.pgUrl).toBe(env.IDLEASE_TEST_PG_URL);
    const err = await resolveDatabases(deps({ env })).catch((e: Error) => e);
    expect((err as Error).message).toMatch(/IDLEASE_TEST_MYSQL_URL=mysql:\/\/u:\*\*\*@db:3306\/x is set but not reachable/);
  });

  it('uses the local servers when reachable, containers only for what is missing', async () => {
    const started: string[][] = [];
    const res = await resolveDatabases(
      deps({
        probe: async (url) => (url.startsWith('mysql') ? undefined : 'refused'),
        dockerAvailable: async () => true,
        startContainers: async (kinds) => {
          started.push(kinds);
          return { urls: { pg: 'postgres://c/x' }, stop: async () => undefined };
        },
      }),
    );
    expect(res.mysqlUrl).toBe('mysql://root@127.0.0.1:3306/test');
    expect(res.pgUrl).toBe('postgres://c/x');
    expect(started).toEqual([['pg']]);
  });
});
