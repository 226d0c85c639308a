import type { PartitionNet } from '../helpers/partition.js';
import { runTool, startMariadb, startPostgres, type ServerInstance } from '../helpers/servers.js';

export type PartitionFlavor = 'postgres' | 'mysql';

/**
 * A private server listening on the partition's server address as well as loopback, whose
 * clients in the link namespaces may connect; `server.url` is loopback (this process),
 * `remoteUrl` the address the workers reach through their links. MariaDB: root may connect
 * from the links' 10.x addresses (USER() then names the client's address).
 */
export async function partitionServer(
  flavor: PartitionFlavor,
  net: PartitionNet,
  mariadbArgs: readonly string[] = [],
): Promise<{ server: ServerInstance; remoteUrl: string }> {
  if (flavor === 'postgres') {
    const server = await startPostgres({
      settings: { listen_addresses: `127.0.0.1,${net.serverAddress}` },
      trustNetworks: [net.clientNetwork],
    });
    return { server, remoteUrl: `postgres://postgres@${net.serverAddress}:${server.port}/postgres` };
  }
  const server = await startMariadb([`--bind-address=127.0.0.1,${net.serverAddress}`, ...mariadbArgs]);
  const grant = `CREATE USER IF NOT EXISTS root@'10.%'; GRANT ALL ON *.* TO root@'10.%'`;
  try {
    runTool('mariadb', ['-h127.0.0.1', `-P${server.port}`, '-uroot', '-e', grant]);
  } catch (e) {
    await server.destroy(); // the caller never receives it, so its afterAll cannot stop it
    throw e;
  }
  return { server, remoteUrl: `mysql://root@${net.serverAddress}:${server.port}/test` };
}
