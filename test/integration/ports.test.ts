// The test servers' ports (test/helpers/ports.ts): several processes asking at once never get the
// same port, none comes from the kernel's ephemeral range, and a process's claims go when it exits.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { TSX_LOADER } from '../helpers/cli.js';
import { freePort } from '../helpers/ports.js';

const CLAIMS = path.join(tmpdir(), 'idlease-test-ports');
const PORTS_MODULE = path.resolve('test/helpers/ports.ts');

describe('test server ports', () => {
  it('4 processes × 150 ports at once: no port twice, all below the ephemeral range, claims removed at exit', async () => {
    const ephemeral = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    // Each child holds its ports until every child has printed them (its stdin closes), as a
    // server would: a port given back by a process that exited may rightly be handed out again.
    const program = `
      const { freePort } = await import(${JSON.stringify(PORTS_MODULE)});
      const ports = [];
      for (let i = 0; i < 150; i++) ports.push(await freePort());
      process.stdout.write(JSON.stringify(ports) + '\\n');
      process.stdin.resume();
      process.stdin.on('end', () => process.exit(0));`;
    const children = Array.from({ length: 4 }, () =>
      spawn(process.execPath, ['--import', TSX_LOADER, '--input-type=module', '-e', program], { stdio: ['pipe', 'pipe', 'inherit'] }),
    );
    const outputs = await Promise.all(
      children.map(
        (c) =>
          new Promise<{ stdout: string }>((resolve, reject) => {
            let stdout = '';
            c.stdout.on('data', (d: Buffer) => {
              stdout += d.toString();
              if (stdout.endsWith('\n')) resolve({ stdout });
            });
            c.once('exit', (code) => reject(new Error(`a child exited (${code}) before printing its ports`)));
          }),
      ),
    );
    await Promise.all(children.map((c) => new Promise((resolve) => (c.once('exit', resolve), c.stdin.end()))));
    const ports = outputs.flatMap((o) => JSON.parse(o.stdout) as number[]);
    expect(ports).toHaveLength(600);
    expect(new Set(ports).size).toBe(600);
    expect(ports.filter((p) => p < 10_000 || p >= ephemeral)).toEqual([]);
    // Every child exited: none of its claims is left.
    expect(ports.filter((p) => existsSync(path.join(CLAIMS, String(p))))).toEqual([]);
  }, 60_000);

  it('a port this process holds stays claimed (a server restarted on it keeps it) and is never handed out again', async () => {
    const first = await freePort();
    expect(readFileSync(path.join(CLAIMS, String(first)), 'utf8').trim()).toBe(String(process.pid));
    const more = await Promise.all(Array.from({ length: 200 }, () => freePort()));
    expect(more).not.toContain(first);
    expect(new Set(more).size).toBe(200);
  });

  it("a claim left by a process that is gone is removed after 10 minutes; a live process's claim is kept", async () => {
    // Names below the range freePort() hands out, so no test here or elsewhere ever asks for them.
    const gone = path.join(CLAIMS, '9998');
    const live = path.join(CLAIMS, '9999');
    const recent = path.join(CLAIMS, '9997');
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
    mkdirSync(CLAIMS, { recursive: true });
    writeFileSync(gone, `${dead}\n`);
    writeFileSync(recent, `${dead}\n`);
    writeFileSync(live, `${process.pid}\n`);
    const old = new Date(Date.now() - 11 * 60_000);
    utimesSync(gone, old, old);
    utimesSync(live, old, old);
    try {
      // 20 ports: a process that finds another one pruning tries again at its next port.
      const program = `const { freePort } = await import(${JSON.stringify(PORTS_MODULE)}); for (let i = 0; i < 20; i++) await freePort();`;
      const child = spawnSync(process.execPath, ['--import', TSX_LOADER, '--input-type=module', '-e', program], { encoding: 'utf8' });
      expect(child.status, child.stderr).toBe(0);
      expect(existsSync(gone)).toBe(false);
      expect(existsSync(recent)).toBe(true);
      expect(existsSync(live)).toBe(true);
    } finally {
      for (const f of [gone, live, recent]) rmSync(f, { force: true });
    }
  });
});
