/**
 * Abusive clients for `idlease serve`, each in a child process of its own (so the test process,
 * which measures the victim's latencies, is not the one busy reconnecting):
 * - `silent`: holds `sockets` connections from `from` that send nothing, reconnecting each one
 *   the server closes (a client with a connection leak does the same by accident);
 * - `pipeline`: `sockets` connections, spread over the `from` addresses, each writing
 *   `requests` pipelined requests for `path` at once and never reading.
 * The child prints one JSON line when it stops (SIGTERM): what it saw.
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface FloodOptions {
  readonly kind: 'silent' | 'pipeline';
  readonly port: number;
  readonly host: string;
  /** Source addresses (loopback: any of 127/8), used in turn. */
  readonly from: readonly string[];
  readonly sockets: number;
  readonly requests?: number;
  readonly path?: string;
  readonly headers?: Readonly<Record<string, string>>;
}

export interface FloodReport {
  readonly connects: number;
  /** Closed by the server, with how long each had lived (ms): the longest ones. */
  readonly closedByServer: number;
  readonly longestLifeMs: number;
  /** Lifetimes of the first sockets, which the server closed on its own deadline (silent ones). */
  readonly firstLivesMs: number[];
  readonly answered503: number;
}

const CHILD = `
const net = require('node:net');
const o = JSON.parse(process.env.FLOOD);
let connects = 0, closedByServer = 0, longest = 0, answered503 = 0, stopping = false;
const firstLives = [];
const request = o.kind === 'pipeline'
  ? ('GET ' + o.path + ' HTTP/1.1\\r\\nHost: ' + o.host + '\\r\\n' + Object.entries(o.headers || {}).map(([k, v]) => k + ': ' + v + '\\r\\n').join('') + '\\r\\n').repeat(o.requests)
  : '';
function open(i, generation) {
  if (stopping) return;
  const t0 = Date.now();
  const s = net.connect({ port: o.port, host: o.host, localAddress: o.from[i % o.from.length] });
  connects++;
  s.on('connect', () => {
    if (o.kind === 'pipeline') { s.write(request); s.pause(); }
  });
  if (o.kind === 'silent') s.on('data', (d) => { if (d.toString().startsWith('HTTP/1.1 503')) answered503++; });
  s.on('error', () => undefined);
  s.on('close', () => {
    if (stopping) return;
    const life = Date.now() - t0;
    closedByServer++;
    longest = Math.max(longest, life);
    if (generation === 0 && firstLives.length < 20) firstLives.push(life);
    if (o.kind === 'silent') setImmediate(() => open(i, generation + 1));
  });
}
for (let i = 0; i < o.sockets; i++) open(i, 0);
process.on('SIGTERM', () => {
  stopping = true;
  process.stdout.write(JSON.stringify({ connects, closedByServer, longestLifeMs: longest, firstLivesMs: firstLives, answered503 }) + '\\n');
  process.exit(0);
});
setInterval(() => undefined, 1000);
process.stdout.write('started\\n');
`;

export interface Flood {
  readonly child: ChildProcess;
  stop(): Promise<FloodReport>;
}

export async function startFlood(o: FloodOptions): Promise<Flood> {
  const child = spawn(process.execPath, ['-e', CHILD], {
    env: { ...process.env, FLOOD: JSON.stringify(o) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setInterval(() => {
      if (out.includes('started\n')) {
        clearInterval(timer);
        resolve();
      }
    }, 20);
    child.once('exit', (code) => {
      clearInterval(timer);
      reject(new Error(`flood exited ${code}`));
    });
  });
  return {
    child,
    async stop() {
      const exited = child.exitCode !== null ? Promise.resolve() : new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const kill = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(kill);
      const line = out.split('\n').find((l) => l.startsWith('{'));
      return JSON.parse(line ?? '{}') as FloodReport;
    },
  };
}
