/** The status page's pure parts (src/serve/status.ts): escaping, durations, the policy. The page itself: test/integration/serve-status*.test.ts. */
import { expect, it } from 'vitest';
import { duration, escapeHtml, STATUS_CSP } from '../../src/serve/status.js';

it('escapeHtml leaves no character that opens a tag, an attribute or an entity', () => {
  const hostile = `<script>alert("x")</script> it's <img src=x onerror=alert(1)> &amp;`;
  const out = escapeHtml(hostile);
  expect(out).toBe('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; it&#39;s &lt;img src=x onerror=alert(1)&gt; &amp;amp;');
  expect(out).not.toMatch(/[<>"']/);
});

it('duration: ms, s, min, h, d and ∞', () => {
  expect([850, 42_000, 17 * 60_000, 5.2 * 3_600_000, 12 * 86_400_000, Infinity].map(duration)).toEqual([
    '850 ms',
    '42 s',
    '17 min',
    '5.2 h',
    '12 d',
    '∞',
  ]);
});

it('the policy allows no script and no inline style but its own', () => {
  expect(STATUS_CSP.split('; ')[0]).toBe("default-src 'none'");
  expect(STATUS_CSP).not.toMatch(/script-src|unsafe-|\*/);
  expect(STATUS_CSP).toMatch(/style-src 'sha256-[A-Za-z0-9+/]{43}='/);
});
