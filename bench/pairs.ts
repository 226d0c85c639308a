/**
 * Paired measurements for benches on a machine whose speed drifts: a contender is always
 * measured right next to its baseline, and the order inside a pair flips every round, so
 * "whoever runs second" bias cancels and neighbour drift hits both sides of a pair.
 */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** One pair [a, b], run in the order round parity says. */
export async function pairOnce<A, B>(round: number, a: () => Promise<A>, b: () => Promise<B>): Promise<[A, B]> {
  if (round % 2 === 0) {
    const x = await a();
    return [x, await b()];
  }
  const y = await b();
  return [await a(), y];
}

export async function alternatingPairs<A, B>(rounds: number, a: () => Promise<A>, b: () => Promise<B>): Promise<Array<[A, B]>> {
  const pairs: Array<[A, B]> = [];
  for (let r = 0; r < rounds; r++) pairs.push(await pairOnce(r, a, b));
  return pairs;
}
