/**
 * The HTTP plumbing of `idlease serve`: the send helpers every route writes with, the raw
 * answers for sockets that never reach a route (a request that does not parse, a connection
 * refused while the server is full), and why a listen failed.
 */
import type http from 'node:http';
import type { AddressInfo, Server } from 'node:net';
import type { Duplex } from 'node:stream';
import { IdleaseError } from '../errors.js';
import type { IdRange } from '../segment/types.js';

/** One ID as text. No answer carrying IDs may be cached: a cache between client and server would hand the same ID out again. */
export function sendText(res: http.ServerResponse, body: string): void {
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length, 'cache-control': 'no-store' });
  res.end(body);
}

/** `{"ids": ["…", …]}` written by hand: a JSON.stringify replacer runs once per ID (100,000 calls for a large batch). */
export function sendIds(res: http.ServerResponse, ids: readonly bigint[]): void {
  const body = ids.length === 0 ? '{"ids":[]}' : `{"ids":["${ids.join('","')}"]}`;
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
  res.end(body);
}

const OPEN = Buffer.from('{"ids":[');
const CLOSE = Buffer.from(']}');
const QUOTE = 0x22;
const COMMA = 0x2c;
const ZERO = 0x30;
const NINE = 0x39;

/**
 * `{"ids": ["…", …]}` for ranges of consecutive IDs, written as bytes into one buffer outside the
 * JS heap: each ID is the previous one's digits plus one, so a batch makes no bigint, string or
 * array per ID. The object-per-ID form (a bigint, its string and a ~220 KB joined body per
 * 10,000-ID batch) allocated more than the young generation holds, so each batch's own objects
 * were promoted, and a pipelined flood of batches grew the old generation by 60–100 MB between
 * two major collections (RSS +167 MB against a 150 MB bound in one CI run).
 */
export function sendIdRanges(res: http.ServerResponse, ranges: readonly IdRange[]): void {
  const body = encodeIdRanges(ranges);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
  res.end(body);
}

/** The body sendIdRanges writes. */
export function encodeIdRanges(ranges: readonly IdRange[]): Buffer {
  let bound = OPEN.length + CLOSE.length;
  for (const r of ranges) bound += Number(r.end - r.start + 1n) * (r.end.toString().length + 3);
  const out = Buffer.allocUnsafe(bound);
  let at = OPEN.copy(out, 0);
  const digits = new Uint8Array(21); // 2^63 has 19 digits; one more for a carry
  let first = true;
  for (const r of ranges) {
    const text = r.start.toString();
    let length = text.length;
    for (let i = 0; i < length; i++) digits[i] = text.charCodeAt(i);
    // A range is at most one batch long (maxBatch), so its count is a safe number.
    for (let left = Number(r.end - r.start); ; left--) {
      if (!first) out[at++] = COMMA;
      first = false;
      out[at++] = QUOTE;
      for (let i = 0; i < length; i++) out[at++] = digits[i]!;
      out[at++] = QUOTE;
      if (left === 0) break;
      // Add one in decimal; a carry out of the first digit makes the number one digit longer.
      let i = length - 1;
      while (i >= 0 && digits[i] === NINE) digits[i--] = ZERO;
      if (i >= 0) digits[i]!++;
      else {
        digits.copyWithin(1, 0, length++);
        digits[0] = ZERO + 1;
      }
    }
  }
  at += CLOSE.copy(out, at);
  return out.subarray(0, at);
}

export function sendJson(res: http.ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** A whole HTTP/1.1 answer written straight to a socket that is then closed (no request object exists, or none will be read). */
export function rawAnswer(socket: Duplex, status: number, reason: string, code: string, message: string, extra = ''): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const body = JSON.stringify({ code, message });
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nconnection: close\r\n${extra}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  // Whatever the client sends after this is not read: close once the answer is flushed, and at
  // the latest after a second (a client that never reads must not keep the socket).
  socket.once('finish', () => socket.destroy());
  setTimeout(() => socket.destroy(), 1_000).unref();
}

/** Malformed requests (bad request line, oversized headers, headers too slow): answer 400/431/408 and hang up, never crash. */
export function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  const [status, reason, code] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'Request Header Fields Too Large', 'HEADERS_TOO_LARGE']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'Request Timeout', 'REQUEST_TIMEOUT']
        : [400, 'Bad Request', 'BAD_REQUEST'];
  rawAnswer(socket, status, reason, code, `${reason}: the request could not be parsed.`);
}

/**
 * Why the server could not listen, as the setup problem it is (BAD_CONFIG): the port is taken,
 * needs privileges, or the host is not an address of this machine. Anything else stays as it is.
 */
export function listenError(err: NodeJS.ErrnoException, host: string, port: number): unknown {
  const at = `${host}:${port}`;
  const why: Record<string, string> = {
    EADDRINUSE: `${at} is already in use: stop what listens there, or pick another port (--port; 0 picks a free one)`,
    EACCES: `listening on ${at} needs privileges this process does not have: pick a port above 1023 (--port)`,
    EADDRNOTAVAIL: `${host} is not an address of this machine: pick one it has (--host), e.g. 127.0.0.1 or 0.0.0.0`,
    ENOTFOUND: `${host} does not resolve: pick an address of this machine (--host), e.g. 127.0.0.1 or 0.0.0.0`,
  };
  const text = err.code === undefined ? undefined : why[err.code];
  return text === undefined ? err : new IdleaseError('BAD_CONFIG', `cannot listen: ${text} (${err.message}).`, { cause: err });
}

/** Listen on host:port; a failure is the BAD_CONFIG above. */
export function listen(server: Server, host: string, port: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(listenError(err as NodeJS.ErrnoException, host, port)));
    // A deep accept queue: a burst of a thousand connections must not overflow it, or the SYNs
    // of other clients are dropped and retried after 1 s and 3 s (the kernel caps it at somaxconn).
    server.listen({ port, host, backlog: 4096 }, () => resolve());
  });
}

export function urlOf(server: Server): string {
  const address = server.address() as AddressInfo;
  return `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
}
