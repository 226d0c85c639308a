/**
 * The router of `idlease serve`: method + path pattern → access + handler (the routes
 * themselves are listed in handlers.ts). Patterns are literal segments and `{name}` parameters; a parameter is
 * percent-decoded and, for tags, validated (no control or bidi characters).
 */
import type http from 'node:http';
import { IdleaseError } from '../errors.js';
import { validateTagText } from '../segment/options.js';
import type { Access, Credential } from './auth.js';

export interface RouteContext {
  readonly req: http.IncomingMessage;
  readonly res: http.ServerResponse;
  readonly params: Readonly<Record<string, string>>;
  readonly query: string;
  /** What the request's Authorization is, found once before routing (auth.ts). */
  readonly credential: Credential;
}

export interface Route {
  readonly method: 'GET' | 'POST';
  /** e.g. '/v1/segment/{tag}/ids' */
  readonly path: string;
  readonly access: Access;
  /** GET routes that may be asked with HEAD (no ID is spent: health and metrics only). */
  readonly head?: boolean;
  handle(ctx: RouteContext): Promise<void>;
}

interface Compiled {
  readonly route: Route;
  readonly segments: readonly string[];
}

export interface Match {
  readonly route: Route;
  readonly params: Record<string, string>;
}

/** A query parameter's raw value; given twice (`?n=2&n=3`) is BAD_ARGUMENT, never a silent pick. */
export function queryParam(query: string, name: string): string | undefined {
  let found: string | undefined;
  let times = 0;
  for (const pair of query.split('&')) {
    const eq = pair.indexOf('=');
    if ((eq < 0 ? pair : pair.slice(0, eq)) !== name) continue;
    found = eq < 0 ? '' : pair.slice(eq + 1);
    times++;
  }
  if (times > 1) throw new IdleaseError('BAD_ARGUMENT', `?${name}= is given ${times} times; give it once.`);
  return found;
}

export function intParam(query: string, name: string, min: number, max: number): number {
  const raw = queryParam(query, name);
  const v = raw !== undefined && /^\d{1,16}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(v) || v < min || v > max) {
    throw new IdleaseError(
      'BAD_ARGUMENT',
      `?${name}= must be an integer from ${min} to ${max}, got ${raw === undefined ? 'nothing' : JSON.stringify(raw.slice(0, 40))}.`,
    );
  }
  return v;
}

function decodeParam(name: string, segment: string): string {
  if (segment === '') throw new IdleaseError('BAD_ARGUMENT', `The path names no ${name}: put it after the last slash.`);
  let value: string;
  try {
    value = decodeURIComponent(segment);
  } catch {
    throw new IdleaseError('BAD_ARGUMENT', `The ${name} in the path is not valid percent-encoding.`);
  }
  // A tag is at most 128 characters (the column's width): longer is the caller's mistake, a 400, not a database error.
  if (value.length > 128)
    throw new IdleaseError('BAD_ARGUMENT', `The ${name} in the path is ${value.length} characters long; at most 128.`);
  return validateTagText(value, `the ${name} in the path`);
}

export class RouteTable {
  private readonly compiled: Compiled[];

  constructor(routes: readonly Route[]) {
    this.compiled = routes.map((route) => ({ route, segments: route.path.split('/') }));
  }

  /** The route for a path, or undefined; `allowed` lists the methods the path answers (for 405). */
  find(path: string, method: string): { match?: Match; allowed: string[] } {
    const parts = path.split('/');
    const allowed: string[] = [];
    for (const { route, segments } of this.compiled) {
      if (segments.length !== parts.length) continue;
      let ok = true;
      for (let i = 0; i < segments.length && ok; i++) {
        const s = segments[i]!;
        ok = s.startsWith('{') || s === parts[i];
      }
      if (!ok) continue;
      const methods = route.head ? [route.method, 'HEAD'] : [route.method];
      allowed.push(...methods);
      if (!methods.includes(method)) continue;
      const params: Record<string, string> = {};
      segments.forEach((s, i) => {
        if (s.startsWith('{')) params[s.slice(1, -1)] = decodeParam(s.slice(1, -1), parts[i]!);
      });
      return { match: { route, params }, allowed };
    }
    return { allowed };
  }

  describe(): string {
    return this.compiled.map(({ route }) => `${route.method} ${route.path}`).join(', ');
  }
}
