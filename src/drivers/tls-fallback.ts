/**
 * The second attempt of libpq's `sslmode=prefer`/`allow` and the mysql client's
 * `ssl-mode=PREFERRED`: neither driver has one (pg and mysql2 fail when the server has no TLS),
 * so connect() marks the connection settings with what to try next and every place that opens a
 * connection from them (knex's pool through connect.ts's tlsFallbackClient, the ticket sessions)
 * retries once.
 *
 * - prefer / PREFERRED: TLS first; when the server answers that it has no TLS at all (pg's
 *   SSLRequest answered 'N', mysql2's HANDSHAKE_NO_SSL_SUPPORT), plain text. A certificate that
 *   does not verify, or a TLS handshake that fails, is not "no TLS": that fails as it would.
 * - allow: plain text first; when the server refuses a connection without encryption (a
 *   `hostssl`-only pg_hba.conf), TLS without a certificate check.
 *
 * The mark is a symbol key: knex's deep copy of the settings and object spread keep it, mysql2's
 * option check (for…in) and pg never see it.
 */

const FALLBACK = Symbol.for('idlease.tlsFallback');

interface Fallback {
  /** The settings of the second attempt (a copy without the mark). */
  readonly settings: Record<string, unknown>;
  /** Whether this failure of the first attempt is the one the mode falls back on. */
  readonly when: 'server-has-no-tls' | 'server-requires-tls';
}

/** `first` with a mark saying: when it fails `when`, connect with `second` instead. */
export function withTlsFallback(
  first: Record<string, unknown>,
  second: Record<string, unknown>,
  when: Fallback['when'],
): Record<string, unknown> {
  return { ...first, [FALLBACK]: { settings: second, when } satisfies Fallback };
}

function fallbackOf(settings: unknown): Fallback | undefined {
  return settings && typeof settings === 'object' ? ((settings as Record<symbol, unknown>)[FALLBACK] as Fallback | undefined) : undefined;
}

/** The mark of `from`, put on `to` (a copy of some of its keys). */
export function keepTlsFallback(from: Record<string, unknown>, to: Record<string, unknown>): Record<string, unknown> {
  const fallback = fallbackOf(from);
  return fallback === undefined ? to : { ...to, [FALLBACK]: fallback };
}

const NO_TLS = /server does not support SSL|HANDSHAKE_NO_SSL_SUPPORT|does not support secure connection/i;
const TLS_REQUIRED = /no encryption/i;

/** The settings to try next after `err`, or undefined when this failure is final. */
export function tlsFallbackFor(settings: unknown, err: unknown): Record<string, unknown> | undefined {
  const fallback = fallbackOf(settings);
  if (fallback === undefined) return undefined;
  const text = `${(err as { code?: unknown })?.code ?? ''} ${(err as Error)?.message ?? String(err)}`;
  return (fallback.when === 'server-has-no-tls' ? NO_TLS : TLS_REQUIRED).test(text) ? fallback.settings : undefined;
}
