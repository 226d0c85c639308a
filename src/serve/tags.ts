/**
 * The tags `idlease serve` serves and their allocators: each tag gets its allocator (and its
 * metrics, at zero) as soon as it is known; tags added while the server runs are found by a
 * read of the tag list at most once a second, and concurrent requests for unknown tags share
 * that one read (300 of them ran 77 full-table reads before).
 */
import { shellWord } from '../shell.js';
import type { Registry } from 'prom-client';
import { MAX_ROW_STEP } from '../dialects/segments.js';
import type { KnexLike } from '../drivers/knex.js';
import { IdleaseError } from '../errors.js';
import { MAX_INT64 } from '../ids.js';
import { collectMetrics, remoteLeaseCounter } from '../metrics/collect.js';
import { addTag, listTags } from '../segment/admin.js';
import { createSegmentAllocator } from '../segment/allocator.js';
import { HttpError } from './http-errors.js';
import type { SegmentAllocator } from '../segment/types.js';

export interface ServedTagsOptions {
  readonly knex: KnexLike;
  readonly tags?: readonly string[];
  readonly table?: string;
  readonly schema?: string;
  readonly maxStep?: number;
  readonly registry: Registry;
  /** For hints: the program name (`idlease`); never the database URL, which no HTTP body carries. */
  readonly adminCommand?: string;
  /** Tags created over HTTP stop when this many are known. Default 1,000. */
  readonly maxTags?: number;
}

/** How many tags the server may know before ?create=1 is refused (the CLI's `tag add` is not bounded by it). */
export const DEFAULT_MAX_TAGS = 1_000;

/** A tag a URL carries as it is (no percent-encoding to undo, no character the router would refuse). */
const PLAIN_TAG = /^[A-Za-z0-9_.-]{1,128}$/;

export class ServedTags {
  readonly allocators = new Map<string, SegmentAllocator>();
  /**
   * The allocators of tags spelled plainly, by name: the hot route (server.ts) looks the raw path
   * up here, once the token opened it. Which tags qualify is decided once per tag, not by a
   * regular expression per request (a quarter of a microsecond of each ~13 µs request).
   */
  readonly plainAllocators = new Map<string, SegmentAllocator>();
  readonly countRemoteLease: (tag: string, ids: number) => void;
  /** Each served tag's description as the last read of the tag list found it (the status page shows it). */
  readonly descriptions = new Map<string, string>();
  private known = new Set<string>();
  /**
   * Tags this server is creating or created (?create=1): counted against --max-tags from the
   * moment the quota is checked, before the insert is awaited — 600 concurrent creates once all
   * passed a check of a count that moved only after each insert — and kept through a re-read of
   * the tag list that started before an insert committed.
   */
  private readonly creating = new Map<string, Promise<void>>();
  private readonly created = new Set<string>();
  private knownAt = 0;
  private refreshing: Promise<void> | undefined;
  closing = false;

  constructor(private readonly o: ServedTagsOptions) {
    this.countRemoteLease = remoteLeaseCounter(o.registry);
  }

  private served(tag: string): boolean {
    return !this.o.tags || this.o.tags.includes(tag);
  }

  /** Read the tag list (one read shared by every caller while it runs). */
  refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const rows = await listTags(this.o.knex, { table: this.o.table, schema: this.o.schema });
        this.known = new Set([...rows.map((r) => r.tag).filter((t) => this.served(t)), ...this.created]);
        for (const r of rows) if (this.known.has(r.tag)) this.descriptions.set(r.tag, r.description);
        this.knownAt = Date.now();
        if (!this.closing) for (const tag of this.known) this.allocatorOf(tag);
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }

  missing(): string[] {
    return (this.o.tags ?? []).filter((t) => !this.known.has(t));
  }

  private allocatorOf(tag: string): SegmentAllocator {
    let a = this.allocators.get(tag);
    if (a) return a;
    a = createSegmentAllocator({
      knex: this.o.knex,
      tag,
      table: this.o.table,
      schema: this.o.schema,
      ...(this.o.maxStep === undefined ? {} : { maxStep: this.o.maxStep }),
    });
    this.allocators.set(tag, a);
    if (PLAIN_TAG.test(tag)) this.plainAllocators.set(tag, a);
    collectMetrics(this.o.registry, a);
    this.countRemoteLease(tag, 0);
    return a;
  }

  /** The allocator of a served tag; UNKNOWN_TAG for one that has no row (looked for at most once a second). */
  async allocatorFor(tag: string): Promise<SegmentAllocator> {
    const a = this.allocators.get(tag);
    if (a) return a;
    if (!this.known.has(tag) && this.served(tag)) {
      if (this.refreshing) await this.refreshing;
      else if (Date.now() - this.knownAt > 1_000) await this.refresh();
    }
    if (!this.known.has(tag)) {
      // Not in --tags: the fix is the server's flag. Missing: the tag's row, added with the CLI on the served database.
      throw new IdleaseError(
        'UNKNOWN_TAG',
        this.o.tags && !this.o.tags.includes(tag)
          ? `Tag ${JSON.stringify(tag)} is not served here: this server runs with --tags ${this.o.tags.join(',')}; restart it with --tags ${shellWord([...this.o.tags, tag].join(','))} to serve it.`
          : `Tag ${JSON.stringify(tag)} does not exist. Add it: \`${this.o.adminCommand ?? 'idlease'} tag add ${shellWord(tag)}\` (with the --url this server was started with).`,
      );
    }
    return this.allocatorOf(tag);
  }

  /** Add a missing served tag (only for callers the auth check allowed to). */
  create(tag: string, start: string | undefined, step: string | undefined): Promise<void> {
    if (this.known.has(tag) || !this.served(tag)) return Promise.resolve();
    // The same tag asked for at once is one insert, one slot.
    const pending = this.creating.get(tag);
    if (pending) return pending;
    const max = this.o.maxTags ?? DEFAULT_MAX_TAGS;
    const count = this.known.size + this.creating.size;
    // Rows are permanent and every one is loaded at each start: an HTTP client may not add them without end.
    if (count >= max)
      return Promise.reject(
        new HttpError(
          403,
          'TAG_QUOTA',
          `This server already has ${count} tags (--max-tags ${max}); no more are created over HTTP. Add one with \`${this.o.adminCommand ?? 'idlease'} tag add ${shellWord(tag)}\` (with the --url this server was started with), or restart with a higher --max-tags.`,
        ),
      );
    // Checked and reserved in one synchronous step: no await between them.
    const insert = this.insert(tag, start, step).finally(() => this.creating.delete(tag));
    this.creating.set(tag, insert);
    return insert;
  }

  private async insert(tag: string, start: string | undefined, step: string | undefined): Promise<void> {
    if (start !== undefined && (!/^\d{1,19}$/.test(start) || BigInt(start) < 1n || BigInt(start) > MAX_INT64))
      throw new IdleaseError('BAD_ARGUMENT', `?start= must be an integer from 1 to 2^63−1, got ${JSON.stringify(start.slice(0, 40))}.`);
    let stepValue: number | undefined;
    if (step !== undefined) {
      stepValue = /^\d{1,9}$/.test(step) ? Number(step) : NaN;
      if (!(stepValue >= 1 && stepValue <= MAX_ROW_STEP))
        throw new IdleaseError(
          'BAD_ARGUMENT',
          `?step= must be an integer from 1 to ${MAX_ROW_STEP}, got ${JSON.stringify(step.slice(0, 40))}.`,
        );
    }
    await addTag(this.o.knex, {
      table: this.o.table,
      schema: this.o.schema,
      tag,
      ...(start === undefined ? {} : { start }),
      ...(stepValue === undefined ? {} : { step: stepValue }),
    });
    // Moved from the reserved slots to the known tags in one step: counted once, never twice.
    this.creating.delete(tag);
    this.created.add(tag);
    this.known.add(tag);
  }

  /** Each tag's state for /readyz: IDs in memory, and the code of its last failed lease. */
  report(): Array<{ tag: string; remaining: string; lastError?: string }> {
    return [...this.allocators].map(([tag, a]) => {
      const s = a.stats();
      const code = s.lastError === undefined ? undefined : ((s.lastError as { code?: unknown }).code ?? 'ERROR');
      return { tag, remaining: s.remaining.toString(), ...(code === undefined ? {} : { lastError: String(code) }) };
    });
  }
}
