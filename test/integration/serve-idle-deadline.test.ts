/**
 * serve's idle deadline (src/serve/guard.ts): a connection being answered that moves no byte
 * either way for `idleTimeoutMs` is closed and counted (shed, reason idle_timeout); one that
 * keeps moving bytes is not. The guard keeps this deadline with its one timer per socket (node's
 * own `server.timeout`, re-armed on every read and write, is off), so it is tested here on real
 * sockets: a net.Server whose sockets the guard admits and marks busy, as serve's limiter does
 * (here, not in test/unit: the unit tests run with no network, not even loopback).
 */
import net from 'node:net';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, expect, it } from 'vitest';
import { createConnectionGuard, rateLimitedLog } from '../../src/serve/guard.js';
import { sleep } from '../helpers/wait.js';

const IDLE_MS = 600;
let server: net.Server | undefined;
const clients: net.Socket[] = [];

afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

/** A server whose guard admits every socket and marks it busy at once (a request being answered that never ends). */
async function busyServer() {
  const registry = new Registry();
  const guard = createConnectionGuard(
    { idleTimeoutMs: IDLE_MS, headerTimeoutMs: 60_000 },
    registry,
    rateLimitedLog(pino({ level: 'silent' })),
  );
  server = net.createServer((socket) => {
    guard.admit(socket);
    guard.busy(socket);
    socket.on('data', () => {}); // read what the client sends: bytes moving in
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as net.AddressInfo;
  const shedIdle = async () =>
    (await registry.getSingleMetric('idlease_serve_connections_shed_total')!.get()).values.find((v) => v.labels.reason === 'idle_timeout')!
      .value;
  return { port, guard, shedIdle };
}

function connect(port: number): Promise<{ socket: net.Socket; closed: Promise<number> }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    clients.push(socket);
    const started = Date.now();
    const closed = new Promise<number>((r) => socket.once('close', () => r(Date.now() - started)));
    socket.once('connect', () => resolve({ socket, closed }));
    socket.once('error', reject);
  });
}

it('a busy connection that moves no byte is closed within idleTimeoutMs and a sixth; one that keeps sending is not', async () => {
  const { port, guard, shedIdle } = await busyServer();
  const silent = await connect(port);
  const talking = await connect(port);
  // The talking client sends a byte every 100 ms: bytes move, its deadline keeps moving.
  const ticker = setInterval(() => talking.socket.write('x'), 100);
  try {
    const silentLived = await silent.closed;
    expect(silentLived).toBeGreaterThanOrEqual(IDLE_MS);
    // Noticed at the first check after the deadline: checks every sixth of it, the first one
    // taking the last change it saw (a sixth late at most) — under 1 + 2/6 of it, plus timer slack.
    expect(silentLived).toBeLessThan(IDLE_MS * (1 + 2 / 6) + 250);
    expect(await shedIdle()).toBe(1);
    await sleep(IDLE_MS * 2);
    expect(talking.socket.destroyed).toBe(false);
    expect(guard.size).toBe(1);
  } finally {
    clearInterval(ticker);
  }
});
