/** In-memory twin of the knex WorkerIdStore for unit tests: same rules, an injected clock standing in for the database's. */
import type { WorkerIdStore, WorkerRow } from '../../src/snowflake/worker-store.js';

interface Row {
  token: string;
  host: string;
  pid: number;
  startedAt: Date;
  expiresAt: number;
  maxTimeMs: bigint;
}

export interface MemoryWorkerIdStore extends WorkerIdStore {
  /** Make the next calls fail as if the database were away. */
  down: boolean;
  rows: Map<string, Row>;
  /** The database instance claims report (undefined: report none, as a store of one's own may). */
  instance: string | undefined;
  /** What the worker table's instance marker names (null: no marker). Starts as a fresh install's: `instance`. */
  marker: string | null;
  /** A copy of the rows and the marker, as a lagging standby holds them. */
  snapshot(): { rows: Map<string, Row>; marker: string | null };
  /** An asynchronous failover: the database becomes `instance` with the (older) state of a snapshot. */
  failover(instance: string, from: { rows: Map<string, Row>; marker: string | null }): void;
}

export function createMemoryWorkerIdStore(dbNow: () => number): MemoryWorkerIdStore {
  const rows = new Map<string, Row>();
  const key = (g: string, id: number) => `${g}\u0000${id}`;
  const copy = (m: Map<string, Row>) => new Map([...m].map(([k, r]) => [k, { ...r }]));
  const store: MemoryWorkerIdStore = {
    down: false,
    rows,
    instance: 'mem:1',
    marker: 'mem:1',
    snapshot: () => ({ rows: copy(rows), marker: store.marker }),
    failover(instance, from) {
      rows.clear();
      for (const [k, r] of copy(from.rows)) rows.set(k, r);
      store.marker = from.marker;
      store.instance = instance;
    },
    async markInstance(instance) {
      if (store.down) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      if (store.instance === instance) store.marker = instance;
    },
    async claim(group, maxWorkerId, holder, ttlMs) {
      if (store.down) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      const now = dbNow();
      for (let id = 0; id <= maxWorkerId; id++) {
        const row = rows.get(key(group, id));
        if (row && row.expiresAt >= now) continue;
        const maxTimeMs = row?.maxTimeMs ?? 0n;
        rows.set(key(group, id), {
          token: holder.token,
          host: holder.host,
          pid: holder.pid,
          startedAt: holder.startedAt,
          expiresAt: now + ttlMs,
          maxTimeMs,
        });
        return { workerId: id, maxTimeMs, instance: store.instance, markedInstance: store.marker };
      }
      return undefined;
    },
    async renew(group, workerId, token, ttlMs, maxTimeMs) {
      if (store.down) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      const row = rows.get(key(group, workerId));
      if (!row || row.token !== token) return false;
      row.expiresAt = dbNow() + ttlMs;
      if (maxTimeMs > row.maxTimeMs) row.maxTimeMs = maxTimeMs;
      return true;
    },
    async release(group, workerId, token, usedMaxTimeMs) {
      if (store.down) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      const row = rows.get(key(group, workerId));
      if (!row || row.token !== token) return false;
      row.expiresAt = 0;
      row.maxTimeMs = usedMaxTimeMs;
      return true;
    },
    async list(group) {
      const now = dbNow();
      const out: WorkerRow[] = [];
      for (const [k, r] of rows) {
        const [g, id] = k.split('\u0000') as [string, string];
        if (group !== undefined && g !== group) continue;
        out.push({
          group: g,
          workerId: Number(id),
          host: r.host,
          pid: r.pid,
          startedAt: r.startedAt,
          leaseExpiresAt: new Date(r.expiresAt),
          maxTimeMs: r.maxTimeMs,
          alive: r.expiresAt >= now,
        });
      }
      return out.sort((a, b) => a.group.localeCompare(b.group) || a.workerId - b.workerId);
    },
  };
  return store;
}
