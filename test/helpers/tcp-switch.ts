/**
 * A TCP switch standing in for a virtual IP: clients connect to one port, the switch
 * forwards to whichever server it points at, and `pointTo()` cuts every open connection
 * (as a VIP moving to another host does) so clients reconnect to the new server.
 */
import net from 'node:net';

export interface TcpSwitch {
  readonly port: number;
  pointTo(port: number): void;
  close(): Promise<void>;
}

export async function startTcpSwitch(targetPort: number): Promise<TcpSwitch> {
  let target = targetPort;
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target, '127.0.0.1');
    open.add(client);
    open.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
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
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}
