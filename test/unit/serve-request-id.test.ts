/** The request ids serve's error answers carry (and its log names): 12 hex digits, none repeated across refills of their pool. */
import { describe, expect, it } from 'vitest';
import { requestId } from '../../src/serve/http-errors.js';

describe('requestId', () => {
  it('gives 12 hex digits, 5,000 draws (several refills of the pool) all different', () => {
    const ids = Array.from({ length: 5_000 }, () => requestId());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{12}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
