/**
 * A TCP switch standing in for a virtual IP: clients connect to one port, the switch
 * forwards to whichever server it points at, and `pointTo()` cuts every open connection
 * (as a VIP moving to another host does) so clients reconnect to the new server.
 */
import net from 'node:net';

export interface TcpSwitch {
  readonly port: number;
  pointTo(port: number): void;
  /**
   * A silent cut, as a partition is: nothing moves either way on open connections (bytes wait,
   * unread, as packets a dead link drops would be resent later) and new connections are held
   * unanswered. Returns the heal: everything flows again, held connections reach the server.
   */
  cut(): () => void;
  close(): Promise<void>;
}

export async function startTcpSwitch(targetPort: number): Promise<TcpSwitch> {
  let target = targetPort;
  const open = new Set<net.Socket>();
  const pairs = new Set<[net.Socket, net.Socket]>();
  let held: Array<() => void> | undefined;
  const connect = (client: net.Socket) => {
    const upstream = net.connect(target, '127.0.0.1');
    open.add(client);
    open.add(upstream);
    const pair: [net.Socket, net.Socket] = [client, upstream];
    pairs.add(pair);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
      pairs.delete(pair);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  };
  const server = net.createServer((client) => {
    if (held === undefined) return connect(client);
    client.pause();
    open.add(client);
    client.on('error', () => client.destroy());
    held.push(() => {
      open.delete(client);
      if (!client.destroyed) connect(client);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    pointTo(p: number) {
      target = p;
      for (const s of open) s.destroy();
      open.clear();
    },
    cut() {
      held ??= [];
      const cutPairs = [...pairs];
      for (const [client, upstream] of cutPairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
      return () => {
        for (const [client, upstream] of cutPairs) {
          if (client.destroyed || upstream.destroyed) continue;
          client.pipe(upstream);
          upstream.pipe(client);
        }
        const waiting = held ?? [];
        held = undefined;
        for (const go of waiting) go();
      };
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}
