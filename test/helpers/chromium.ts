/**
 * Debian's headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
 * file descriptors 3 and 4, JSON messages ended by a NUL byte) — what Puppeteer does underneath,
 * in a hundred lines, so the page tests need no browser package (playwright-core would download
 * nothing here, but it is a dependency to keep in step with the browser Debian ships) and no
 * WebSocket client (Node 20 has none built in).
 *
 * What a page test needs: open a page answering a Basic challenge the way a person at the prompt
 * would (Fetch.authRequired), every console error and uncaught exception the page causes (a CSP
 * violation is one: Log.entryAdded, level error), JavaScript evaluated in the page (DevTools'
 * evaluation is not bound by the page's CSP), a screenshot.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';

export const CHROMIUM = process.env.IDLEASE_TEST_CHROMIUM ?? '/usr/bin/chromium';

interface Message {
  id?: number;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: { message: string };
  sessionId?: string;
}

export interface BrowserPage {
  /** Console errors, uncaught exceptions and error log entries (CSP violations among them), as text. */
  readonly errors: string[];
  /** Go to `url` and wait for its load event. */
  goto(url: string): Promise<void>;
  /** Run `action` (which makes the page navigate) and wait for the next load event. */
  navigation(action: () => Promise<unknown>): Promise<void>;
  /** An expression's value, evaluated in the page. */
  evaluate<T>(expression: string): Promise<T>;
  /** A PNG of the viewport. */
  screenshot(): Promise<Buffer>;
  close(): Promise<void>;
}

/**
 * Start Chromium with one page of `width`×`height` that answers a Basic challenge with
 * `credentials`. Throws, saying how to install it, when it is not there: a page test never skips.
 */
export async function openPage(
  o: { credentials?: { username: string; password: string }; width?: number; height?: number } = {},
): Promise<BrowserPage> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} is missing: \`npm run db:up\` installs Debian's chromium (scripts/ensure-databases.sh), or set IDLEASE_TEST_CHROMIUM.`,
    );
  const profile = mkdtempSync(join(tmpdir(), 'idlease-chromium-'));
  const child: ChildProcess = spawn(
    CHROMIUM,
    [
      '--headless',
      '--no-sandbox', // CI and this machine run tests as root, where Chromium's sandbox refuses to start
      '--disable-gpu',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--no-default-browser-check',
      '--disable-extensions',
      '--disable-background-networking',
      '--disable-component-update',
      '--remote-debugging-pipe',
      `--user-data-dir=${profile}`,
      'about:blank',
    ],
    { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4_000)));
  const toBrowser = child.stdio[3] as Writable;
  const fromBrowser = child.stdio[4] as Readable;

  let nextId = 1;
  const pending = new Map<number, { resolve: (r: Record<string, unknown>) => void; reject: (e: Error) => void; method: string }>();
  const listeners: Array<(m: Message) => void> = [];
  let buffered = '';
  fromBrowser.on('data', (d: Buffer) => {
    buffered += d.toString('utf8');
    for (let end = buffered.indexOf('\0'); end >= 0; end = buffered.indexOf('\0')) {
      const m = JSON.parse(buffered.slice(0, end)) as Message;
      buffered = buffered.slice(end + 1);
      if (m.id !== undefined) {
        const p = pending.get(m.id);
        pending.delete(m.id);
        if (m.error) p?.reject(new Error(`${p.method}: ${m.error.message}`));
        else p?.resolve(m.result ?? {});
      } else for (const l of listeners) l(m);
    }
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => {
    for (const p of pending.values()) p.reject(new Error(`Chromium exited during ${p.method}: ${stderr}`));
    pending.clear();
  });

  const send = (method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<Record<string, unknown>> =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject, method });
      toBrowser.write(`${JSON.stringify({ id, method, params, ...(sessionId === undefined ? {} : { sessionId }) })}\0`);
    });

  const { targetId } = (await send('Target.createTarget', { url: 'about:blank' })) as { targetId: string };
  const { sessionId } = (await send('Target.attachToTarget', { targetId, flatten: true })) as { sessionId: string };
  const page = (method: string, params: Record<string, unknown> = {}) => send(method, params, sessionId);

  const errors: string[] = [];
  let loaded: (() => void) | undefined;
  listeners.push((m) => {
    if (m.sessionId !== sessionId) return;
    const p = m.params ?? {};
    if (m.method === 'Page.loadEventFired') loaded?.();
    else if (m.method === 'Log.entryAdded') {
      const e = p.entry as { level: string; source: string; text: string; url?: string };
      if (e.level === 'error') errors.push(`${e.source}: ${e.text}${e.url ? ` (${e.url})` : ''}`);
    } else if (m.method === 'Runtime.consoleAPICalled' && (p.type === 'error' || p.type === 'assert'))
      errors.push(`console.${String(p.type)}: ${JSON.stringify(p.args)}`);
    else if (m.method === 'Runtime.exceptionThrown') errors.push(`exception: ${JSON.stringify(p.exceptionDetails)}`);
    else if (m.method === 'Fetch.requestPaused') void page('Fetch.continueRequest', { requestId: p.requestId }).catch(() => undefined);
    else if (m.method === 'Fetch.authRequired')
      void page('Fetch.continueWithAuth', {
        requestId: p.requestId,
        authChallengeResponse: o.credentials ? { response: 'ProvideCredentials', ...o.credentials } : { response: 'CancelAuth' },
      }).catch(() => undefined);
  });
  await Promise.all([page('Page.enable'), page('Runtime.enable'), page('Log.enable')]);
  // Requests pause only to let a Basic challenge be answered: the page is reached as a browser with a person at its prompt reaches it.
  await page('Fetch.enable', { handleAuthRequests: true, patterns: [{ urlPattern: '*' }] });
  await page('Emulation.setDeviceMetricsOverride', {
    width: o.width ?? 1400,
    height: o.height ?? 1000,
    deviceScaleFactor: 1,
    mobile: false,
  });

  const navigation = async (action: () => Promise<unknown>): Promise<void> => {
    const load = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no load event within 30 s')), 30_000);
      loaded = () => {
        clearTimeout(timer);
        loaded = undefined;
        resolve();
      };
    });
    await action();
    await load;
  };

  return {
    errors,
    navigation,
    goto: (url) =>
      navigation(async () => {
        const r = (await page('Page.navigate', { url })) as { errorText?: string };
        if (r.errorText) throw new Error(`navigating to ${url}: ${r.errorText}`);
      }),
    async evaluate<T>(expression: string): Promise<T> {
      const r = (await page('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true })) as {
        result: { value?: unknown };
        exceptionDetails?: unknown;
      };
      if (r.exceptionDetails) throw new Error(`evaluating ${expression}: ${JSON.stringify(r.exceptionDetails)}`);
      return r.result.value as T;
    },
    async screenshot() {
      const { data } = (await page('Page.captureScreenshot', { format: 'png' })) as { data: string };
      return Buffer.from(data, 'base64');
    },
    async close() {
      await send('Browser.close').catch(() => undefined);
      const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(killer);
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
