/**
 * The partition harness itself (test/helpers/partition.ts): a cut is a silent drop (the
 * connection stays open, nothing arrives, nothing is refused), each direction can be cut alone,
 * a heal lets the same connection carry on, and destroy() leaves nothing behind. Where the
 * machine cannot build partitions the harness says what is missing instead of skipping.
 */
import { execFileSync } from 'node:child_process';
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { checkPartitionCapability, createPartitionNet, type PartitionNet } from '../helpers/partition.js';
import { freePort } from '../helpers/servers.js';
import { sleep } from '../helpers/wait.js';

describe('partition harness', () => {
  let pnet: PartitionNet | undefined;
  let server: net.Server | undefined;
  let serverB: net.Server | undefined;
  afterAll(() => {
    pnet?.destroy();
    server?.close();
    serverB?.close();
  });

  it('says what is missing rather than skipping', () => {
    const path = process.env.PATH;
    process.env.PATH = '/nonexistent';
    try {
      expect(() => checkPartitionCapability()).toThrow(
        /`ip` \(Debian package iproute2\), `nft` \(Debian package nftables\).*ensure-databases\.sh/,
      );
    } finally {
      process.env.PATH = path;
    }
  });

  it('cut drops silently each way or one port, heal resumes the same connection, drop is lossy, destroy removes everything', async () => {
    pnet = createPartitionNet({ links: 1 });
    const link = pnet.links[0]!;
    // Echo server in this namespace: counts what reached it, answers every line.
    let received = 0;
    const port = await freePort();
    server = net.createServer((s) =>
      s.on('data', (d) => {
        received += d.length;
        s.write(d);
      }),
    );
    await new Promise<void>((r) => server!.listen(port, pnet!.serverAddress, r));
    // A client in the link's namespace: sends each stdin line, prints each answer, and says how the socket ended.
    const client = link.spawn(process.execPath, [
      '-e',
      `
      const s = require('node:net').connect(${port}, '${pnet.serverAddress}', () => console.log('connected'));
      s.on('data', (d) => console.log('got ' + d.toString().trim()));
      s.on('error', (e) => console.log('error ' + e.code));
      s.on('close', () => console.log('closed'));
      process.stdin.on('data', (d) => s.write(d));
    `,
    ]);
    let out = '';
    client.stdout!.on('data', (d: Buffer) => (out += d));
    const until = async (text: string, ms = 5_000) => {
      for (const end = Date.now() + ms; !out.includes(text); await sleep(10))
        if (Date.now() > end) throw new Error(`no "${text}" in: ${out}`);
    };
    await until('connected');
    client.stdin!.write('one\n');
    await until('got one');

    link.cut();
    const before = received;
    client.stdin!.write('two\n');
    await sleep(800);
    expect(received).toBe(before); // nothing reached the server
    expect(out).not.toMatch(/got two|error|closed/); // and the client was told nothing
    link.heal();
    await until('got two', 10_000); // TCP retransmits on the same connection

    link.cut('from-server'); // requests arrive, answers are lost
    client.stdin!.write('three\n');
    for (const end = Date.now() + 5_000; received === before + 4 && Date.now() < end;) await sleep(10);
    expect(received).toBeGreaterThan(before + 4);
    await sleep(300);
    expect(out).not.toContain('got three');
    link.heal();
    await until('got three', 10_000);

    // One server of two on the address cut: the other still answers on a connection of its own.
    const portB = await freePort();
    serverB = net.createServer((sock) => sock.end());
    await new Promise<void>((r) => serverB!.listen(portB, pnet!.serverAddress, r));
    const probe = (p: number) =>
      execFileSync(
        'ip',
        [
          'netns',
          'exec',
          link.ns,
          process.execPath,
          '-e',
          `
        const s = require('node:net').connect(${p}, '${pnet!.serverAddress}', () => { console.log('up'); process.exit(0); });
        s.on('error', () => {});
        setTimeout(() => { console.log('silent'); process.exit(0); }, 700);
      `,
        ],
        { encoding: 'utf8' },
      ).trim();
    link.cut('both', { port });
    expect(probe(port)).toBe('silent');
    expect(probe(portB)).toBe('up');
    link.heal();
    expect(probe(port)).toBe('up');

    link.drop(0.3); // a lossy link: TCP gets through, late
    client.stdin!.write('four\n');
    await until('got four', 10_000);
    link.heal();

    // netem is a kernel module some kernels lack (this machine's has none): then slow() says so.
    let slowed: unknown;
    try {
      link.slow(50, 10);
    } catch (err) {
      slowed = err;
    }
    if (slowed) expect(String(slowed)).toMatch(/netem/);
    link.heal();

    const { ns } = link;
    const address = pnet.serverAddress;
    pnet.destroy();
    await new Promise((r) => (client.exitCode !== null || client.signalCode !== null ? r(null) : client.once('exit', r)));
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).not.toContain(ns);
    expect(execFileSync('ip', ['-4', 'addr'], { encoding: 'utf8' })).not.toContain(`${address}/`);
  });
});
