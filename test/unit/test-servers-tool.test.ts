/**
 * The private test servers' setup tools (test/helpers/servers.ts): a failure shows the tool's
 * own stderr and is retried once after cleaning up, so a flaky first `mariadb-install-db` in a
 * loaded run neither fails silently nor fails the suite.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runTool } from '../helpers/servers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'idlease-runtool-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('runTool', () => {
  it("names the tool's stderr and status after a second failure", () => {
    expect(() => runTool('sh', ['-c', 'echo "disk is full" >&2; exit 3'])).toThrow(/attempt 2 of 2, status 3\): disk is full/);
  });

  it('retries once, after the cleanup, and then succeeds', () => {
    const marker = path.join(dir, 'first-failed');
    let cleanups = 0;
    // Fails while the marker is absent; the cleanup writes it, so the second attempt passes.
    runTool('sh', ['-c', `test -e ${marker} || { echo "half-made data directory" >&2; exit 1; }`], () => {
      cleanups++;
      writeFileSync(marker, 'x');
    });
    expect(cleanups).toBe(1);
    expect(existsSync(marker)).toBe(true);
    expect(readFileSync(marker, 'utf8')).toBe('x');
  });
});
