/**
 * Ports for the private servers tests start (PostgreSQL, MariaDB, Redis, etcd, Patroni, HAProxy …).
 *
 * Asking the kernel for port 0 and closing the socket is not enough: the port comes from the
 * ephemeral range, where every outgoing connection on the machine also takes its local port, and
 * the server binds it only later (seconds later for a Patroni replica, after a restart for a server
 * a test stopped). A fresh-clone CI lost a Patroni replica that way, once. So:
 *   - ports come from below the kernel's ephemeral range, which no outgoing connection uses;
 *   - each is claimed with a file made O_EXCL in a directory every test process on the machine
 *     shares, holding the claimant's pid, so two test processes never pick the same one;
 *   - the claim lasts as long as the process (a server restarted on its port keeps it) and is
 *     removed at exit. vitest ends its workers with SIGTERM, which runs no exit hook, so a claim
 *     can outlive its process: the first freePort() of a process removes claims older than 10
 *     minutes whose process is gone, one process at a time (a lock directory), so no two
 *     processes ever delete the same claim and a fresh one is never taken for a stale one;
 *   - the port must still bind on 127.0.0.1 (something outside the tests may listen there).
 */
import { chmodSync, closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

const CLAIMS = path.join(tmpdir(), 'idlease-test-ports');
const LOWEST = 10_000;
const STALE_MS = 10 * 60_000;
const claimed = new Set<number>();
let pruned = false;

process.once('exit', () => {
  for (const port of claimed) rmSync(path.join(CLAIMS, String(port)), { force: true });
});

/** The first port of the kernel's ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range). */
function ephemeralStart(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(first) && first > 0 ? first : 32_768;
  } catch {
    return 32_768;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function claimsDir(): void {
  if (pruned) return;
  mkdirSync(CLAIMS, { recursive: true });
  // Every user's test processes share it (sticky: each removes only its own files).
  try {
    chmodSync(CLAIMS, 0o1777);
  } catch {
    /* made by another user, who set it so */
  }
  const lock = path.join(CLAIMS, 'prune.lock');
  try {
    mkdirSync(lock);
  } catch {
    // Another process prunes now (this one tries again at its next port); a lock left by one
    // killed mid-prune goes after a minute.
    try {
      if (Date.now() - statSync(lock).mtimeMs > 60_000) rmSync(lock, { recursive: true, force: true });
    } catch {
      /* gone meanwhile */
    }
    return;
  }
  pruned = true;
  try {
    for (const name of readdirSync(CLAIMS)) {
      if (!/^\d+$/.test(name)) continue;
      const file = path.join(CLAIMS, name);
      try {
        if (Date.now() - statSync(file).mtimeMs < STALE_MS) continue;
        if (!alive(Number(readFileSync(file, 'utf8').trim()))) rmSync(file, { force: true });
      } catch {
        /* gone meanwhile, or not ours to remove */
      }
    }
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

function claim(port: number): boolean {
  claimsDir();
  let fd: number;
  try {
    fd = openSync(path.join(CLAIMS, String(port)), 'wx');
  } catch {
    return false; // claimed by another process: try another port
  }
  writeSync(fd, `${process.pid}\n`);
  closeSync(fd);
  claimed.add(port);
  return true;
}

function release(port: number): void {
  claimed.delete(port);
  rmSync(path.join(CLAIMS, String(port)), { force: true });
}

function binds(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen({ port, host: '127.0.0.1', exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

/** A port below the ephemeral range, claimed by this process until it exits, that binds on 127.0.0.1 now. */
export async function freePort(): Promise<number> {
  const top = ephemeralStart();
  if (top - LOWEST < 1_000)
    throw new Error(
      `The ephemeral port range starts at ${top}, leaving no room for test servers between ${LOWEST} and it. ` +
        'Raise it: sysctl net.ipv4.ip_local_port_range="32768 60999"',
    );
  for (let attempt = 0; attempt < 500; attempt++) {
    const port = LOWEST + Math.floor(Math.random() * (top - LOWEST));
    if (claimed.has(port) || !claim(port)) continue;
    if (await binds(port)) return port;
    release(port);
  }
  throw new Error(`no free port between ${LOWEST} and ${top} after 500 tries (claims in ${CLAIMS})`);
}
