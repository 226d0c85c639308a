/**
 * A link with latency, for kernels without netem (this one: `tc qdisc … netem` is refused):
 * a relay on a local port that holds every chunk, each way, for `delayMs` ± `jitterMs` before
 * passing it on, in order. Statements then take the delayed round trips they would behind a slow
 * WAN link; what it does not model is packet-level delay of TCP's own handshake and ACKs.
 */
import net from 'node:net';

export interface DelayLink {
  readonly port: number;
  close(): Promise<void>;
}

function relay(from: net.Socket, to: net.Socket, delayMs: number, jitterMs: number): void {
  // Release times never go backwards, so chunks keep their order (timers due in order fire in order).
  let last = 0;
  const at = () => (last = Math.max(last, Date.now() + delayMs + (Math.random() * 2 - 1) * jitterMs));
  from.on('data', (chunk: Buffer) => {
    const due = at();
    setTimeout(() => to.destroyed || to.write(chunk), due - Date.now());
  });
  from.on('end', () => setTimeout(() => to.destroyed || to.end(), Math.max(0, at() - Date.now())));
}

export async function startDelayLink(targetPort: number, delayMs: number, jitterMs: number): Promise<DelayLink> {
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1');
    open.add(client).add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    relay(client, upstream, delayMs, jitterMs);
    relay(upstream, client, delayMs, jitterMs);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}
