/**
 * The key `idlease serve` counts wrong tokens against (src/serve/auth.ts clientKey): an IPv4
 * address, an IPv6 address's /64 whatever its spelling, and X-Forwarded-For's last entry only
 * from a proxy the operator named.
 */
import { describe, expect, it } from 'vitest';
import { clientKey, ipv6Slash64 } from '../../src/serve/auth.js';

const none = new Set<string>();

describe('clientKey', () => {
  it('an IPv4 address is its own key', () => {
    expect(clientKey('192.0.2.7', undefined, none)).toBe('192.0.2.7');
  });

  it('every address of one IPv6 /64 is one key, in any spelling', () => {
    const keys = [
      '2001:db8:1:2::1',
      '2001:db8:1:2:ffff:ffff:ffff:ffff',
      '2001:0db8:0001:0002:0000:0000:0000:0009',
      '2001:DB8:1:2::abcd%eth0',
      '2001:db8:1:2::1.2.3.4',
    ].map((a) => clientKey(a, undefined, none));
    expect(new Set(keys)).toEqual(new Set(['2001:db8:1:2::/64']));
    expect(clientKey('2001:db8:1:3::1', undefined, none)).toBe('2001:db8:1:3::/64');
    expect(ipv6Slash64('::1')).toBe('0:0:0:0::/64');
    expect(ipv6Slash64('fe80::1')).toBe('fe80:0:0:0::/64');
    expect(ipv6Slash64('2001:db8::')).toBe('2001:db8:0:0::/64');
  });

  it('X-Forwarded-For counts only from a named proxy, and then only its last entry (what the proxy appended)', () => {
    const proxies = new Set(['10.0.0.7']);
    expect(clientKey('10.0.0.7', '203.0.113.9, 198.51.100.4', proxies)).toBe('198.51.100.4');
    expect(clientKey('10.0.0.7', ['1.1.1.1', '198.51.100.5'], proxies)).toBe('198.51.100.5');
    expect(clientKey('10.0.0.7', '2001:db8:9:9::5', proxies)).toBe('2001:db8:9:9::/64');
    expect(clientKey('10.0.0.7', '::ffff:198.51.100.6', proxies)).toBe('198.51.100.6');
    // Not an address: the proxy's own address is the key.
    expect(clientKey('10.0.0.7', 'unknown', proxies)).toBe('10.0.0.7');
    expect(clientKey('10.0.0.7', undefined, proxies)).toBe('10.0.0.7');
    // From anyone else the header is ignored.
    expect(clientKey('10.0.0.8', '198.51.100.4', proxies)).toBe('10.0.0.8');
    expect(clientKey('10.0.0.8', '198.51.100.4', none)).toBe('10.0.0.8');
  });
});
