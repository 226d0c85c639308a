/**
 * A URL whose scheme names the other kind of server than the one at its port
 * (`mysql://…:5432`, `postgres://…:3306`). Neither driver says so: pg reads MySQL's greeting as
 * "unexpected copyData", and mysql2 waits for a greeting a PostgreSQL server never sends (the
 * client speaks first there) until its connect timeout. Recognised here, within --wait.
 */
import { connect } from 'node:net';
import type { ServerProtocol } from '../urls.js';

/** PostgreSQL's SSLRequest: a PostgreSQL server answers it with one byte, `S` or `N`, and nothing else does. */
const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);

/** Whether a PostgreSQL server listens at host:port (false on anything else, or no answer within `timeoutMs`). */
export function postgresAnswersAt(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (answer: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('connect', () => socket.write(SSL_REQUEST));
    socket.once('data', (data) => done(data.length === 1 && (data[0] === 0x53 || data[0] === 0x4e)));
    socket.once('error', () => done(false));
    socket.once('close', () => done(false));
  });
}

/** What pg says when the server at the other end speaks MySQL's protocol (it sends a greeting first). */
export function isForeignProtocolAnswer(err: unknown): boolean {
  // The last one: with sslmode prefer (the default) pg first sends an SSLRequest, which a
  // PostgreSQL server answers with one byte, S or N; a server that speaks first (MySQL's greeting)
  // answers with anything else.
  return /unexpected \w+ message from backend|Received unexpected|Unknown message code|error establishing an SSL connection/i.test(
    String((err as Error)?.message ?? ''),
  );
}

/** The BAD_CONFIG message for a URL of one kind pointed at a server of the other. */
export function wrongServerMessage(target: string, expected: ServerProtocol): string {
  // A URL for a server that speaks first (MySQL) reached one that waits (PostgreSQL), or the other way round.
  return expected.serverSpeaksFirst
    ? `cannot use ${target}: the server at that address speaks PostgreSQL, not MySQL. Use postgres://… for it, or the MySQL/MariaDB port (3306 by default).`
    : `cannot use ${target}: the server at that address does not speak PostgreSQL (a MySQL/MariaDB server?). Use mysql://… for it, or the PostgreSQL port (5432 by default).`;
}
