/**
 * The scheme a ticket allocator's servers draw under, checked as a set. Flickr's servers are safe
 * only while every one serves the same increment with its own offset: a server that moved to a
 * new pair (a reshard) may be followed only once no other server of the set is still open under
 * the old one. Otherwise the moved server's new residue classes cover IDs the unmoved one goes on
 * issuing (issue 42: t1 and t2 moved to increment 2, t3 stayed at 3, 257 repeats).
 *
 * So the allocator follows a reshard for all its servers at once: the first server seen on an
 * increment other than the set's triggers one read of every server's scheme. Open servers that
 * agree (closed ones cannot draw: a reshard in progress) move the set; open servers that disagree
 * refuse the whole set with BAD_CONFIG until a reshard makes it one scheme again. Pure decisions
 * here, no I/O of its own: each member reads its own scheme, bounded.
 */
import { IdleaseError } from '../errors.js';
import type { TicketScheme } from './source.js';

/** One server as the set check sees it. */
export interface SchemeMember {
  readonly name: string;
  /** The server's scheme now, or undefined when it did not answer (it is then out of the rotation). */
  readSchemeNow(): Promise<TicketScheme | undefined>;
  /** Out of the rotation, refused with `err`, until a probe finds the set one scheme again. */
  refuse(err: IdleaseError): void;
}

/** Why these open servers cannot be drawn from together, or undefined when they can. */
export function schemeDisagreement(open: ReadonlyArray<{ name: string; increment: number; offset: number }>): string | undefined {
  const increments = new Set(open.map((s) => s.increment));
  const offsets = new Set(open.map((s) => s.offset));
  if (increments.size <= 1 && offsets.size === open.length) return undefined;
  const pairs = open.map((s) => `${s.name} serves offset ${s.offset} of increment ${s.increment}`).join(', ');
  return increments.size > 1 ? `the ticket servers are on mixed schemes (${pairs})` : `two ticket servers share an offset (${pairs})`;
}

export class SchemeSet {
  /** The increment every open server of the set serves (the options' until a reshard moves the set). */
  increment: number;
  /** Set while the servers disagree: every server's next contact checks the set again. */
  private mixed: IdleaseError | undefined;
  /** One check at a time: the calls that meet a moved server together share it. */
  private checking: Promise<void> | undefined;

  constructor(
    increment: number,
    private readonly members: () => readonly SchemeMember[],
  ) {
    this.increment = increment;
  }

  /** Whether a server that read `scheme` may draw only after the whole set is checked. */
  needsCheck(scheme: TicketScheme): boolean {
    return this.mixed !== undefined || scheme.increment !== this.increment;
  }

  /** Read every server's scheme; move the set when the open ones agree, refuse it (and throw) when not. */
  check(): Promise<void> {
    this.checking ??= this.run().finally(() => (this.checking = undefined));
    return this.checking;
  }

  private async run(): Promise<void> {
    const members = this.members();
    const read = await Promise.all(members.map(async (m) => ({ m, scheme: await m.readSchemeNow() })));
    const open = read.flatMap(({ m, scheme }) =>
      scheme?.open ? [{ name: m.name, increment: scheme.increment, offset: scheme.offset }] : [],
    );
    const why = schemeDisagreement(open);
    if (why !== undefined) {
      this.mixed = new IdleaseError(
        'BAD_CONFIG',
        `${why}: drawing from both would repeat IDs, so this allocator hands out none until every server serves one increment with its own offset. ` +
          'Move the whole set to one scheme with reshardTickets (CLI: idlease tickets reshard) naming every server; the allocator follows by itself.',
      );
      for (const { m } of read) m.refuse(this.mixed);
      throw this.mixed;
    }
    this.mixed = undefined;
    if (open.length > 0) this.increment = open[0]!.increment;
  }
}
