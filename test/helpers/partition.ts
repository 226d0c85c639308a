/**
 * Real network partitions between test processes and a database server on this machine.
 *
 * Topology: the server stays in this (root) network namespace and listens on `serverAddress`,
 * an address of its own on `lo`. Each link is a network namespace with one veth pair to the
 * root namespace; a client process runs inside it (`link.spawn`) and reaches the server through
 * the veth only. Cutting a link is nftables `drop` rules inside that namespace: packets vanish
 * silently, so connections stay "open" and statements hang until a timeout, as behind a dead
 * switch or a changed security group — not a refused or reset connection.
 *
 * Names carry this process's pid and a counter (parallel runs never collide) and every link of a
 * net shares one 10.x.0.0/16 not routed here yet. Everything is removed by `destroy()`, and by
 * an exit hook if a test fails before its afterAll; namespaces and addresses left by a run that was SIGKILLed
 * (their pid is gone) are swept when the next net is made.
 *
 * Needs root, iproute2 (`ip`) and nftables (`nft`): bash scripts/ensure-databases.sh installs
 * them. Without them `createPartitionNet` throws saying what is missing; it never skips.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';

export interface Link {
  /** The network namespace the client runs in. */
  readonly ns: string;
  /** The client's address inside the namespace. */
  readonly address: string;
  /**
   * Drop every packet between this link's namespace and the server address, silently.
   * `to-server` drops only what the client sends, `from-server` only what it would receive.
   * `port`: only the traffic of the server listening there (several servers share the address:
   * cut one ticket server, or a Redis primary, and leave the others reachable). Replaces the
   * rules of an earlier cut or drop.
   */
  cut(direction?: 'both' | 'to-server' | 'from-server', options?: { port?: number }): void;
  /** Drop this fraction (0..1) of the packets each way, at random. */
  drop(fraction: number): void;
  /** Delay each packet (netem); throws where the kernel has no netem qdisc. */
  slow(delayMs: number, jitterMs: number): void;
  /**
   * The service on `fromPort` moved to `toPort`, as this link sees it (a virtual IP taken over by
   * another host): new connections to the server address on `fromPort` reach `toPort`, and packets
   * of connections opened before are answered with a TCP reset, as the new owner of the address
   * answers them. Other links still reach `fromPort`. Undone by `heal()`.
   */
  redirect(fromPort: number, toPort: number): void;
  /** Remove every cut, drop, delay and redirect. */
  heal(): void;
  /** Run a command inside the namespace (`ip netns exec`); killed by destroy() if still running. */
  spawn(command: string, args: readonly string[], options?: SpawnOptions): ChildProcess;
}

export interface PartitionNet {
  /** The server's address: give it to the server (listen) and to the clients (connect). */
  readonly serverAddress: string;
  /** The /16 every link's client address is in (for pg_hba.conf and the like). */
  readonly clientNetwork: string;
  readonly links: readonly Link[];
  /** Kill the processes spawned in the links, delete the namespaces, links and the server address. */
  destroy(): void;
}

const PREFIX = 'idlease-part-';
const live = new Set<() => void>();
let nets = 0;
let hooked = false;

function sh(cmd: string, args: readonly string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function quiet(cmd: string, args: readonly string[]): void {
  try {
    sh(cmd, args);
  } catch {
    // cleanup: what is already gone stays gone
  }
}

function stderrOf(err: unknown): string {
  const e = err as { stderr?: unknown; message?: unknown };
  return String(e.stderr || e.message).trim();
}

/** Throws, naming what is missing, unless this machine can build namespaces, veths and nft rules. */
export function checkPartitionCapability(): void {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push('root (network namespaces and veth pairs need CAP_NET_ADMIN)');
  for (const [bin, pkg] of [
    ['ip', 'iproute2'],
    ['nft', 'nftables'],
  ] as const) {
    try {
      sh(bin, ['-V']);
    } catch {
      missing.push(`\`${bin}\` (Debian package ${pkg})`);
    }
  }
  if (missing.length > 0) {
    throw new Error(`Partition tests need ${missing.join(', ')}. Run them as root after: bash scripts/ensure-databases.sh`);
  }
}

/** Whether a process with this pid exists (signal 0). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Namespaces and server addresses of earlier runs whose process is gone (killed before its exit
 * hook ran). Both carry the owner's pid: the namespace in its name, the address in its label.
 */
function sweepStale(): void {
  for (const line of sh('ip', ['netns', 'list']).split('\n')) {
    const name = line.split(' ')[0] ?? '';
    if (name.startsWith(PREFIX) && !alive(Number(name.slice(PREFIX.length).split('-')[0]))) quiet('ip', ['netns', 'del', name]);
  }
  for (const line of sh('ip', ['-4', 'addr', 'show', 'dev', 'lo']).split('\n')) {
    const m = / inet (\S+) .* lo:p([0-9a-z]+)n[0-9a-z]+$/.exec(line);
    if (m && !alive(parseInt(m[2]!, 36))) quiet('ip', ['addr', 'del', m[1]!, 'dev', 'lo']);
  }
}

/** A 10.x.0.0/16 that nothing on this machine routes or holds yet. */
function freeSubnet(): number {
  const used = sh('ip', ['-4', 'addr']) + sh('ip', ['-4', 'route']);
  const start = (process.pid + nets * 7) % 50;
  for (let i = 0; i < 50; i++) {
    const x = 200 + ((start + i) % 50);
    if (!used.includes(`10.${x}.`)) return x;
  }
  throw new Error('No free 10.200-249.0.0/16 for the partition links: delete stale links (ip -4 addr).');
}

export function createPartitionNet(options: { links: number }): PartitionNet {
  checkPartitionCapability();
  sweepStale();
  const seq = (nets++).toString(36);
  const id = `${process.pid.toString(36)}${seq}`;
  const x = freeSubnet();
  const serverAddress = `10.${x}.255.1`;
  const children = new Set<ChildProcess>();
  const namespaces: string[] = [];
  let serverAddressAdded = false;
  let destroyed = false;

  const destroy = () => {
    if (destroyed) return;
    destroyed = true;
    live.delete(destroy);
    // Processes first: a namespace with a process in it outlives `ip netns del`, and so does its veth.
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    for (const ns of namespaces) quiet('ip', ['netns', 'del', ns]);
    if (serverAddressAdded) quiet('ip', ['addr', 'del', `${serverAddress}/32`, 'dev', 'lo']);
  };
  live.add(destroy);
  if (!hooked) {
    hooked = true;
    // A failed test may never reach afterAll; the worker's exit still removes what it made.
    process.once('exit', () => {
      for (const d of [...live]) d();
    });
  }

  const links: Link[] = [];
  try {
    sh('ip', ['addr', 'add', `${serverAddress}/32`, 'dev', 'lo', 'label', `lo:p${process.pid.toString(36)}n${seq}`]);
    serverAddressAdded = true;
    for (let i = 0; i < options.links; i++) {
      const ns = `${PREFIX}${process.pid}-${id}-${i}`;
      // Interface names have 15 characters at most.
      const hostIf = `il${id}h${i}`;
      const nsIf = `il${id}n${i}`;
      const hostAddress = `10.${x}.${i}.1`;
      const address = `10.${x}.${i}.2`;
      sh('ip', ['netns', 'add', ns]);
      namespaces.push(ns);
      sh('ip', ['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf, 'netns', ns]);
      sh('ip', ['addr', 'add', `${hostAddress}/24`, 'dev', hostIf]);
      sh('ip', ['link', 'set', hostIf, 'up']);
      sh('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
      sh('ip', ['-n', ns, 'addr', 'add', `${address}/24`, 'dev', nsIf]);
      sh('ip', ['-n', ns, 'link', 'set', nsIf, 'up']);
      sh('ip', ['-n', ns, 'route', 'add', `${serverAddress}/32`, 'via', hostAddress]);
      // The rules live inside the client's namespace, so they go with it; two chains so that
      // each direction can be cut alone.
      const nft = (...args: string[]) => sh('ip', ['netns', 'exec', ns, 'nft', ...args]);
      nft('add', 'table', 'inet', 'partition');
      nft('add', 'chain', 'inet', 'partition', 'out', '{ type filter hook output priority 0; policy accept; }');
      nft('add', 'chain', 'inet', 'partition', 'in', '{ type filter hook input priority 0; policy accept; }');
      const rules = (out: string | undefined, inbound: string | undefined, port?: number) => {
        nft('flush', 'chain', 'inet', 'partition', 'out');
        nft('flush', 'chain', 'inet', 'partition', 'in');
        const to = port === undefined ? [] : ['tcp', 'dport', String(port)];
        const from = port === undefined ? [] : ['tcp', 'sport', String(port)];
        if (out) nft('add', 'rule', 'inet', 'partition', 'out', 'ip', 'daddr', serverAddress, ...to, ...out.split(' '));
        if (inbound) nft('add', 'rule', 'inet', 'partition', 'in', 'ip', 'saddr', serverAddress, ...from, ...inbound.split(' '));
      };
      links.push({
        ns,
        address,
        cut(direction = 'both', { port } = {}) {
          rules(direction === 'from-server' ? undefined : 'drop', direction === 'to-server' ? undefined : 'drop', port);
        },
        drop(fraction) {
          if (!(fraction >= 0 && fraction <= 1)) throw new Error(`drop(fraction): 0..1, got ${fraction}`);
          const random = `numgen random mod 1000 < ${Math.round(fraction * 1000)} drop`;
          rules(random, random);
        },
        slow(delayMs, jitterMs) {
          try {
            for (const [where, dev] of [
              [[], hostIf],
              [['-n', ns], nsIf],
            ] as const) {
              sh('tc', [...where, 'qdisc', 'replace', 'dev', dev, 'root', 'netem', 'delay', `${delayMs}ms`, `${jitterMs}ms`]);
            }
          } catch (err) {
            throw new Error(`slow() needs the kernel's netem qdisc (sch_netem), which this kernel does not offer: ${stderrOf(err)}`, {
              cause: err,
            });
          }
        },
        redirect(fromPort, toPort) {
          quiet('ip', ['netns', 'exec', ns, 'nft', 'delete', 'table', 'ip', 'moved']);
          // NAT runs before the filter on the way out: a new connection already carries toPort
          // there, so only packets of connections opened before the move are reset.
          nft('add', 'table', 'ip', 'moved');
          nft('add', 'chain', 'ip', 'moved', 'nat', '{ type nat hook output priority -100; policy accept; }');
          nft('add', 'chain', 'ip', 'moved', 'out', '{ type filter hook output priority 10; policy accept; }');
          const moved = `ip daddr ${serverAddress} tcp dport ${fromPort}`;
          nft('add', 'rule', 'ip', 'moved', 'nat', ...moved.split(' '), 'dnat', 'to', `${serverAddress}:${toPort}`);
          nft('add', 'rule', 'ip', 'moved', 'out', ...moved.split(' '), ...'reject with tcp reset'.split(' '));
        },
        heal() {
          rules(undefined, undefined);
          quiet('ip', ['netns', 'exec', ns, 'nft', 'delete', 'table', 'ip', 'moved']);
          quiet('tc', ['qdisc', 'del', 'dev', hostIf, 'root']);
          quiet('tc', ['-n', ns, 'qdisc', 'del', 'dev', nsIf, 'root']);
        },
        spawn(command, args, spawnOptions = {}) {
          // `ip netns exec` execs the command in place: the child's pid is the command's own.
          const child = spawn('ip', ['netns', 'exec', ns, command, ...args], spawnOptions);
          children.add(child);
          child.once('exit', () => children.delete(child));
          return child;
        },
      });
    }
  } catch (err) {
    destroy();
    throw new Error(`Could not build the partition links (root, iproute2 and nftables with network namespaces needed): ${stderrOf(err)}`, {
      cause: err,
    });
  }
  return { serverAddress, clientNetwork: `10.${x}.0.0/16`, links, destroy };
}
