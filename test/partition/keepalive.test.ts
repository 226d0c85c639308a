/**
 * connect()'s TCP keepalive against a silent cut, on an idle pooled connection, on PostgreSQL
 * (pg sends no keepalive unless asked) and MariaDB (mysql2's first probe would come after the
 * kernel's 2 hours). Two processes, each in a network namespace of its own, hold
 * one idle connection each: p0 with keepAliveMs 1,000, p1 with 0. Both links are cut both ways.
 * p0's kernel declares its connection dead after the idle time and PROBES unanswered probes one
 * second apart (libuv ≥ 1.45, Node 20, sets TCP_KEEPINTVL 1 s and TCP_KEEPCNT 10 on every
 * keepalive socket, over the kernel's 75 s × 9) and closes it; p1's stays "established" for as
 * long as the cut lasts. After the heal both pools answer a query: p0's on a new connection, p1's
 * on the old one.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';
import { builtWorker } from '../helpers/built-worker.js';
import { createPartitionNet, type Link, type PartitionNet } from '../helpers/partition.js';
import type { ServerInstance } from '../helpers/servers.js';
import { partitionServer } from './servers.js';
import { sleep } from '../helpers/wait.js';

const WORKER = `${REPO_ROOT}/test/partition/keepalive-worker.ts`;
const KEEPALIVE_MS = 1_000;
/** What libuv sets on a keepalive socket: a probe a second, ten of them. */
const INTERVAL_S = 1;
const PROBES = 10;
/** Dead after the idle time and the unanswered probes; slack for timers. */
const DEAD_WITHIN_MS = KEEPALIVE_MS + INTERVAL_S * 1_000 * PROBES + 2_000;

describe.each(['postgres', 'mysql'] as const)('TCP keepalive on an idle pooled connection behind a silent cut (%s)', (flavor) => {
  let pnet: PartitionNet;
  let server: ServerInstance;
  let remoteUrl: string;
  beforeAll(async () => {
    pnet = createPartitionNet({ links: 2 });
    ({ server, remoteUrl } = await partitionServer(flavor, pnet));
  });
  afterAll(async () => {
    pnet?.destroy();
    await server?.destroy();
  });

  it('keepAliveMs closes the dead idle connection during the cut; keepalive off leaves it open; both pools answer after the heal', async () => {
    const start = (link: Link, keepAliveMs: number) => {
      const child: ChildProcess = link.spawn(process.execPath, [builtWorker(WORKER), JSON.stringify({ url: remoteUrl, keepAliveMs })], {
        cwd: REPO_ROOT,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const w = { link, child, log: '' };
      child.stdout!.on('data', (d: Buffer) => (w.log += d));
      child.stderr!.on('data', (d: Buffer) => (w.log += d));
      return w;
    };
    const [on, off] = [start(pnet.links[0]!, KEEPALIVE_MS), start(pnet.links[1]!, 0)];
    const seen = async (w: typeof on, re: RegExp, from = 0) => {
      for (const until = Date.now() + 20_000; ; await sleep(20)) {
        const m = w.log.slice(from).match(re);
        if (m) return m;
        if (w.child.exitCode !== null || Date.now() > until) throw new Error(`no ${re} in:\n${w.log}`);
      }
    };
    await Promise.all([seen(on, /ready/), seen(off, /ready/)]);
    const established = (link: Link) =>
      execFileSync('ip', ['netns', 'exec', link.ns, 'ss', '-tnoH', 'state', 'established', 'dst', pnet.serverAddress], {
        encoding: 'utf8',
      })
        .split('\n')
        .filter(Boolean);
    expect(established(on.link).join('\n')).toMatch(/timer:\(keepalive,/);
    expect(established(off.link).join('\n')).not.toMatch(/timer:\(keepalive,/);

    on.link.cut();
    off.link.cut();
    const cutAt = Date.now();
    while (established(on.link).length > 0) {
      if (Date.now() - cutAt > DEAD_WITHIN_MS) throw new Error(`p0's idle connection still open ${DEAD_WITHIN_MS} ms into the cut`);
      await sleep(50);
    }
    const deadAfterMs = Date.now() - cutAt;
    await sleep(500);
    expect(established(off.link), 'without keepalive the dead connection stays').toHaveLength(1);
    on.link.heal();
    off.link.heal();
    const logs = [on.log.length, off.log.length];
    on.child.stdin!.write('go\n');
    off.child.stdin!.write('go\n');
    const answers = await Promise.all([seen(on, /(ok|fail) (.*)/, logs[0]), seen(off, /(ok|fail) (.*)/, logs[1])]);
    expect(
      answers.map((a) => a[1]),
      `${on.log}\n---\n${off.log}`,
    ).toEqual(['ok', 'ok']);
    on.child.stdin!.end();
    off.child.stdin!.end();
    console.log(
      JSON.stringify({
        deadAfterMs,
        boundMs: KEEPALIVE_MS + INTERVAL_S * 1_000 * PROBES,
        queryAfterHealMs: answers.map((a) => Number(a[2])),
      }),
    );
  }, 60_000);
});
