/**
 * Who may ask `idlease serve` for what. Three secrets can open the /api and /v1 routes: the
 * operator's token (`--token`, `--token-file`, `$IDLEASE_TOKEN`) and, on the embedded
 * database, a secret made anew for each run and written only into the directory's lock file
 * (mode 0600), which the `idlease` CLI of the same user presents to draw through the server.
 * Creating a tag over HTTP takes that run secret, or the token on a server started with
 * `--allow-create`. Tokens are compared in constant time, as digests.
 *
 * The status page (/status) takes the token too, also as HTTP Basic's password, so a browser can
 * open it without the token in a URL (docs/serve.md); Basic opens nothing else.
 *
 * /metrics takes the token too whenever one is set (Prometheus sends `authorization`); only the
 * health endpoints stay open, and they tell nobody whether a token is right: /healthz answers the
 * same to all, /readyz's fuller body (database, tags) goes to the right token and a wrong one there
 * is counted and limited exactly as on /api. The scheme is matched case-insensitively (RFC 9110 §11.1).
 *
 * **Authenticate, then limit.** Every request's token is checked first — one SHA-256 of what it
 * carries, compared in constant time with both secrets' digests, whatever the route or tag — so a
 * request with the right token is answered whatever its neighbours send (a limit checked first,
 * keyed by address, once locked a client with the right token out behind the NAT of one retrying
 * an old token). Wrong tokens are then counted per client key (clientKey below) and, past 10 a
 * minute from one key or 1,000 a minute from all together (so rotating addresses buys nothing),
 * answered 429 + Retry-After instead of 401. The counts live in two generations of Maps: O(1)
 * per failure, at most 10,000 keys, the least recently failing forgotten first, half at a time.
 * (One Map evicting its first key each time was not O(1): V8 leaves deleted entries as holes
 * that the next `keys().next()` walks over, 40,000 rotating addresses cost 1.4× the CPU of 100.)
 *
 * What the limit does not do is stop guessing: a guess that is right is the right token. Guessing
 * is stopped by the token's length (16 bytes at least beyond loopback: 2^128 guesses); the limit
 * makes it loud (counted, logged) and keeps it from costing the server more than a refusal.
 *
 * Two browser defences stand before any route: a list of Host names (against DNS rebinding; on
 * by default: the loopback names and the listen address, extended by --allowed-hosts), and a POST must carry a header a cross-site form cannot send (`Authorization`,
 * or `X-Idlease`), so a page in a browser cannot lease ranges without a preflight it never gets.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import { isIP } from 'node:net';
import { Counter, type Registry } from 'prom-client';
import { IdleaseError } from '../errors.js';
import { HttpError } from './http-errors.js';

export type Access = 'open' | 'token' | 'metrics' | 'status';

/**
 * What a request's Authorization says: the operator's token, this run's secret, the token sent as
 * HTTP Basic's password (`basic`: opens the status page only), nothing, or something wrong.
 */
export type Credential = 'token' | 'run' | 'basic' | 'none' | 'wrong';

export interface AuthOptions {
  readonly token?: string;
  /** The per-run secret of the lock file (embedded database only). */
  readonly runSecret?: string;
  readonly allowCreate?: boolean;
  /** Host header values (without port) accepted; undefined: any. */
  readonly allowedHosts?: readonly string[];
  /**
   * Addresses of reverse proxies the operator runs in front of the server: a request arriving
   * from one counts its wrong tokens against the client its X-Forwarded-For names. From any
   * other address the header is ignored (anyone can send it).
   */
  readonly trustProxy?: readonly string[];
  /** Where wrong-token attempts are counted. */
  readonly registry?: Registry;
  /** Rate-limited warning lines (guard.ts's rateLimitedLog). */
  readonly log?: (event: string, fields: Record<string, unknown>, msg: string) => void;
  /** The socket's client address (IPv4 mapped into IPv6 already unmapped). */
  readonly addressOf?: (req: http.IncomingMessage) => string;
}

/** Wrong tokens one client key may send per window before its wrong tokens are answered 429. */
const FAILURES_PER_KEY = 10;
/** Wrong tokens from all keys together per window: past it every wrong token is 429 until the window ends. */
const FAILURES_IN_ALL = 1_000;
const FAILURE_WINDOW_MS = 60_000;
/** Client keys remembered at most (the least recently failing is forgotten first). */
const MAX_KEYS = 10_000;

export interface Auth {
  /** Whether a token or run secret exists at all (a server without either is open on /api and /v1). */
  readonly required: boolean;
  /** What the request's Authorization is: the same work whatever it carries (one digest, two constant-time compares). */
  credentialOf(req: http.IncomingMessage): Credential;
  /** Throw 421/403 for a wrong Host or a bare POST; 401 (or 429, counted) unless `credential` opens a route of this access. */
  check(req: http.IncomingMessage, access: Access, credential: Credential): void;
  /**
   * For an open route that says more to the right token (/readyz): true for the right token (or
   * none required); a wrong one is counted like any other, and past the limit throws 429.
   */
  fuller(req: http.IncomingMessage, credential: Credential): boolean;
  /** The credential opens /api and /v1 (the right token or run secret, or none is required). */
  opens(credential: Credential): boolean;
  /** The Host header names this server (or no list is kept). */
  hostAllowed(req: http.IncomingMessage): boolean;
  /** The request may create a missing tag. */
  mayCreate(credential: Credential): boolean;
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/** The refusal of a missing or wrong token: made once (its stack is never shown), so refusing costs no Error per request. */
export const UNAUTHORIZED = new HttpError(
  401,
  'UNAUTHORIZED',
  'Send Authorization: Bearer <token> (the token the server was started with).',
);

/**
 * The status page's refusal: the same 401, with the challenge that makes a browser ask for a
 * password (the token). Only /status sends it: a prompt on /api would invite a browser to cache
 * the token and attach it to requests other sites' pages make.
 */
export const STATUS_UNAUTHORIZED = new HttpError(
  401,
  'UNAUTHORIZED',
  'The status page takes the token: as the password of HTTP Basic (any user name) in a browser, or Authorization: Bearer <token>.',
  { 'www-authenticate': 'Basic realm="idlease", charset="UTF-8"' },
);

/** Whether an Authorization header is HTTP Basic, the scheme in any case. */
function isBasic(h: string | undefined): h is string {
  return typeof h === 'string' && h.length > 6 && h[5] === ' ' && h.slice(0, 5).toLowerCase() === 'basic';
}

/** The password of `Authorization: Basic base64(user:password)`; the user name is not looked at. */
function basicPasswordOf(h: string): string | undefined {
  const decoded = Buffer.from(h.slice(6).trim(), 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? undefined : decoded.slice(colon + 1);
}

/** The credentials of `Authorization: Bearer <token>`, the scheme in any case. */
function bearerOf(req: http.IncomingMessage): string | undefined {
  const h = req.headers.authorization;
  if (typeof h !== 'string' || h.length < 7 || h[6] !== ' ' || h.slice(0, 6).toLowerCase() !== 'bearer') return undefined;
  return h.slice(7);
}

/**
 * The first 64 bits of an IPv6 address, as `a:b:c:d::/64`: one subscriber, one host or one
 * container network routinely holds a whole /64, so counting each of its 2^64 addresses apart
 * would let one client rotate through them.
 */
export function ipv6Slash64(address: string): string {
  const bare = address.replace(/%.*$/, '');
  const [head = '', tail] = bare.split('::');
  const front = head === '' ? [] : head.split(':');
  const back = tail === undefined || tail === '' ? [] : tail.split(':');
  // A dotted IPv4 tail fills two groups.
  const backGroups = back.length + (back.at(-1)?.includes('.') ? 1 : 0);
  const groups = tail === undefined ? front : [...front, ...Array<string>(Math.max(0, 8 - front.length - backGroups)).fill('0'), ...back];
  return `${groups
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

/**
 * The key wrong tokens count against: the client's IPv4 address, its IPv6 /64, or, when the
 * request comes from a proxy the operator named, the address that proxy appended last to
 * X-Forwarded-For (the entries before it are whatever the client chose to send). A header
 * that names no address leaves the proxy's own address as the key.
 */
export function clientKey(address: string, forwardedFor: string | string[] | undefined, trustedProxies: ReadonlySet<string>): string {
  let client = address;
  if (trustedProxies.size > 0 && trustedProxies.has(address) && forwardedFor !== undefined) {
    const header = Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor;
    const named = header.slice(header.lastIndexOf(',') + 1).trim();
    const unmapped = named.startsWith('::ffff:') && isIP(named.slice(7)) === 4 ? named.slice(7) : named;
    if (isIP(unmapped) !== 0) client = unmapped;
  }
  return isIP(client) === 6 ? ipv6Slash64(client) : client;
}

/** --trust-proxy's addresses, checked (a name or a typo would silently trust nobody). */
function proxySet(list: readonly string[] | undefined): Set<string> {
  const set = new Set<string>();
  for (const raw of list ?? []) {
    const a = raw.trim().replace(/^\[(.*)\]$/, '$1');
    if (isIP(a) === 0)
      throw new IdleaseError(
        'BAD_CONFIG',
        `--trust-proxy takes the IP addresses of your proxies (comma-separated), e.g. 10.0.0.7,::1; ${JSON.stringify(raw.slice(0, 60))} is not one.`,
      );
    set.add(a.startsWith('::ffff:') ? a.slice(7) : a);
  }
  return set;
}

export function createAuth(o: AuthOptions): Auth {
  const token = o.token === undefined ? undefined : digest(o.token);
  const run = o.runSecret === undefined ? undefined : digest(o.runSecret);
  const required = token !== undefined;
  // A digest nobody's token hashes to stands in for a secret that is not set: the compare runs all the same.
  const absent = Buffer.alloc(32, 0);
  const hosts = o.allowedHosts === undefined ? undefined : new Set(o.allowedHosts.map((h) => h.toLowerCase()));
  const proxies = proxySet(o.trustProxy);
  const failuresCounter =
    o.registry &&
    new Counter({
      name: 'idlease_serve_auth_failures_total',
      help: 'Requests carrying a wrong token (result: unauthorized, answered 401; limited, answered 429: past 10 a minute from one client key or 1,000 from all)',
      labelNames: ['result'],
      registers: [o.registry],
    });
  failuresCounter?.inc({ result: 'unauthorized' }, 0);
  failuresCounter?.inc({ result: 'limited' }, 0);
  // Keys that failed lately are in `young`; when it holds half the cap it becomes `old` and the
  // previous `old` — keys that failed in neither of the last two generations — is dropped whole.
  let young = new Map<string, { since: number; count: number }>();
  let old = new Map<string, { since: number; count: number }>();
  const failuresOf = (key: string): { since: number; count: number } => {
    let f = young.get(key);
    if (f !== undefined) return f;
    f = old.get(key) ?? { since: 0, count: 0 };
    young.set(key, f);
    if (young.size >= MAX_KEYS / 2) {
      old = young;
      young = new Map();
    }
    return f;
  };
  const all = { since: 0, count: 0 };
  const addressOf = o.addressOf ?? ((req: http.IncomingMessage) => req.socket.remoteAddress ?? '?');
  // The verdict per raw Host header value: clients send the same few, and this runs on the hot route.
  const verdicts = new Map<string, boolean>();
  const hostAllowed = (req: http.IncomingMessage): boolean => {
    if (hosts === undefined) return true;
    const raw = req.headers.host ?? '';
    const known = verdicts.get(raw);
    if (known !== undefined) return known;
    const host = raw
      .replace(/:\d+$/, '')
      .replace(/^\[(.*)\]$/, '$1')
      .toLowerCase();
    const ok = hosts.has(host);
    if (verdicts.size < 256) verdicts.set(raw, ok);
    return ok;
  };

  function credentialOf(req: http.IncomingMessage): Credential {
    const given = bearerOf(req);
    if (given === undefined) {
      const h = req.headers.authorization;
      if (h === undefined) return 'none';
      const password = isBasic(h) ? basicPasswordOf(h) : undefined;
      // Basic carries the operator's token only (the CLI presents the run secret as a bearer).
      // The compare runs even with no token set, so a right and a wrong password take the same time.
      return password !== undefined && timingSafeEqual(digest(password), token ?? absent) && token !== undefined ? 'basic' : 'wrong';
    }
    const d = digest(given);
    // Both compares always run: which secret matched (or that none did) takes the same time.
    const isToken = timingSafeEqual(d, token ?? absent) && token !== undefined;
    const isRun = timingSafeEqual(d, run ?? absent) && run !== undefined;
    return isToken ? 'token' : isRun ? 'run' : 'wrong';
  }

  const opens = (c: Credential) => !required || c === 'token' || c === 'run';

  /** Count a wrong token against its client key and all keys; throw 429 past either limit, else `refusal` (401). */
  function refuseWrong(req: http.IncomingMessage, refusal: HttpError = UNAUTHORIZED): never {
    const key = clientKey(addressOf(req), req.headers['x-forwarded-for'], proxies);
    const now = Date.now();
    const f = failuresOf(key);
    if (now - f.since > FAILURE_WINDOW_MS) {
      f.since = now;
      f.count = 0;
    }
    f.count++;
    if (now - all.since > FAILURE_WINDOW_MS) {
      all.since = now;
      all.count = 0;
    }
    all.count++;
    const overKey = f.count > FAILURES_PER_KEY;
    if (overKey || all.count > FAILURES_IN_ALL) {
      failuresCounter?.inc({ result: 'limited' });
      const left = Math.max(1, Math.ceil(((overKey ? f.since : all.since) + FAILURE_WINDOW_MS - now) / 1000));
      throw new HttpError(
        429,
        'TOO_MANY_ATTEMPTS',
        overKey
          ? 'Too many requests with a wrong token from this client; retry later with the right one.'
          : 'Too many requests with a wrong token reach this server; retry later with the right one.',
        { 'retry-after': String(left) },
      );
    }
    failuresCounter?.inc({ result: 'unauthorized' });
    o.log?.('auth-failed', { client: key, inWindow: f.count }, `a request from ${key} carried a wrong token`);
    throw refusal;
  }

  return {
    required,
    credentialOf,
    opens,
    hostAllowed,
    mayCreate: (c) => c === 'run' || (o.allowCreate === true && c === 'token'),
    fuller(req, credential) {
      if (opens(credential)) return true;
      if (credential === 'wrong') refuseWrong(req);
      return false;
    },
    check(req, access, credential) {
      if (!hostAllowed(req))
        throw new HttpError(
          421,
          'MISDIRECTED',
          'This server does not answer for that Host (the listen address, loopback names and --allowed-hosts).',
        );
      // Basic does not count: a browser attaches the credentials it cached for the status page
      // to any request for this origin, cross-site form posts included.
      const authorization = req.headers.authorization;
      if (req.method === 'POST' && (authorization === undefined || isBasic(authorization)) && req.headers['x-idlease'] === undefined)
        throw new HttpError(
          403,
          'FORBIDDEN',
          'A POST must carry Authorization or an X-Idlease header (what a cross-site form cannot send): e.g. -H "X-Idlease: 1".',
        );
      // /metrics is the 'metrics' access: the token whenever one is set (tag names, rates and a render's cost are not for anyone).
      if (access === 'open' || opens(credential)) return;
      // The status page also opens to the token sent as Basic's password; nothing else does.
      if (access === 'status') {
        if (credential === 'basic') return;
        if (credential === 'wrong') refuseWrong(req, STATUS_UNAUTHORIZED);
        throw STATUS_UNAUTHORIZED;
      }
      if (credential === 'wrong') refuseWrong(req);
      throw UNAUTHORIZED;
    },
  };
}
