/**
 * A value that is costly to make and may be a little old: made at most once per `maxAgeMs`,
 * with at most one making in flight, whatever the number of callers. `/metrics` at 5,000 tags
 * is a 9.5 MB render of 170–350 ms of one core: 16 scrapers rendering each their own took
 * /healthz to 8.6 s and RSS to 786 MB. `/readyz` is a database probe: 256 anonymous callers
 * probing each through the lease pool flipped readiness and slowed leases to seconds.
 */
export interface Cached<T> {
  /** The value made within maxAgeMs, or the one being made, or a new one. */
  get(): Promise<T>;
  /** How many times the value was made (for tests and a metric). */
  readonly made: number;
}

export function singleFlightCache<T>(make: () => Promise<T>, maxAgeMs = 1_000, now: () => number = Date.now): Cached<T> {
  let value: { at: number; v: T; took: number } | undefined;
  let inFlight: Promise<T> | undefined;
  let made = 0;
  return {
    get(): Promise<T> {
      // Kept at least 4× as long as it took to make, so making it never takes more than a fifth
      // of the time (a render that blocks the event loop 1 s is made at most every 5 s).
      if (value !== undefined && now() - value.at < Math.max(maxAgeMs, 4 * value.took)) return Promise.resolve(value.v);
      inFlight ??= (async () => {
        try {
          made++;
          const t0 = now();
          const v = await make();
          value = { at: now(), v, took: now() - t0 };
          return v;
        } finally {
          inFlight = undefined;
        }
      })();
      return inFlight;
    },
    get made() {
      return made;
    },
  };
}
