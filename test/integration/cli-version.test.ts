import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, runCli } from '../helpers/cli.js';

const { version } = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };

// The checkout's bin/idlease.js on the built dist/ (a project that builds it, not unit); the installed
// package's `idlease --version` (dist/src/cli/, one level deeper) is checked by test/package.
describe('idlease --version', () => {
  it.each([['--version'], ['-V']])("%s prints package.json's version and exits 0", async (flag) => {
    const r = await runCli([flag]);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`${version}\n`);
    expect(r.code).toBe(0);
  });

  it('--help lists it', async () => {
    expect((await runCli(['--help'])).stdout).toMatch(/-V, --version/);
  });
});
