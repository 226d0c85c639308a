/**
 * The engine a handle reaches, asked of the server once per handle (`VERSION()`, `version()`)
 * rather than guessed from the driver: mysql2 reaches MySQL as well as MariaDB, `pg` reaches
 * CockroachDB as well as PostgreSQL. What differs between engines is a member here — where
 * idlease's objects live, the `next_id()` design, the ticket counter, NO PAD collations — so code
 * above src/dialects/ asks `engine.namespaces === 'schema'`, never which driver it is on (the
 * structure test forbids comparing a family name there). Modelled on kysely's DialectAdapter.
 *
 * Adding an engine is one more entry in ENGINES (its `recognizes` reads the version string), its
 * statement texts in this folder if its SQL family is new (flavor.ts lists what a family supplies),
 * and a driver hook saying which family its connection speaks (drivers/knex-family.ts for knex).
 * A server no entry recognizes is refused with BAD_CONFIG naming what it is, before any statement
 * of idlease's runs on it: the first statement of every executor a driver makes asks (servedBy).
 */
import { IdleaseError } from '../errors.js';
import { DEFAULT_SCHEMA, quoteIdent, type Flavor } from './detect.js';
import { perDialect, type PerDialect } from './flavor.js';
import { instanceExpression, leaseInstanceExpression } from './instance.js';
import { untestedServer } from './server-kind.js';
import type { SqlExecutor, SqlResult, SqlValue } from './sql.js';

/** What an engine can do and how it names things: members, not a name to compare. */
export interface Engine {
  /** For messages: 'MariaDB', 'PostgreSQL', 'PGlite'. */
  readonly name: string;
  /** What the server said it is ('' for an engine taken from the driver's family, not asked). */
  readonly version: string;
  /** Whether this engine's version string is its own. Asked in ENGINES order; the first that says yes serves. */
  readonly recognizes: (version: string) => boolean;
  /**
   * Which SQL family's statements this engine runs: what the statement builders of this folder take.
   * Code above src/dialects/ hands it on and never compares it.
   */
  readonly sql: Flavor;
  /**
   * Where idlease's objects live. 'schema': a namespace inside the database (PostgreSQL; `--schema`
   * applies, default DEFAULT_SCHEMA). 'database': the connection's database itself (MariaDB; a
   * schema option is refused, the URL names the database).
   */
  readonly namespaces: 'schema' | 'database';
  /** The schema idlease's own tables go into when none is named (undefined: the connection's database). */
  readonly defaultSchema: string | undefined;
  /**
   * How `next_id()` is built. 'function': a PL/pgSQL function over a sequence, used as a column
   * DEFAULT, one logical shard per schema. 'ticker': a SEQUENCE stepped by a scheduler event and read
   * by a BEFORE INSERT trigger (a stored function may not be a DEFAULT there), one shard per database.
   */
  readonly nextId: 'function' | 'ticker';
  /** The ticket counter: a SEQUENCE (no session state, the app's pool draws) or a table whose AUTO_INCREMENT draws on sessions of idlease's own. */
  readonly ticketCounter: 'sequence' | 'table';
  /** Whether the counter table takes a storage engine (InnoDB/MyISAM: tickets.engine). */
  readonly supportsStorageEngines: boolean;
  /** Whether text keys need a NO PAD collation to keep 'a' and 'a ' two tags (MariaDB's PAD SPACE default). */
  readonly supportsNoPadCollation: boolean;
  /** Whether `ALTER TABLE … ADD COLUMN IF NOT EXISTS` exists (both engines tested; MySQL 8 lacks it). */
  readonly supportsAddColumnIfNotExists: boolean;
  /** Whether the database is one in-process connection (PGlite): no side connection, no pool, no replica. */
  readonly embedded: boolean;
  /** An already-validated identifier quoted for this engine. */
  readonly quote: (ident: string) => string;
  /**
   * Which instance a statement runs on, as SQL the server evaluates (instance.ts): `instance` the
   * full identity snowflake claims compare, `leaseInstance` the hot-path one leases and draws write.
   */
  readonly instance: string;
  readonly leaseInstance: string;
}

const MARIADB: Engine = Object.freeze({
  name: 'MariaDB',
  version: '',
  recognizes: (version: string) => /mariadb/i.test(version),
  sql: 'mysql',
  namespaces: 'database',
  defaultSchema: undefined,
  nextId: 'ticker',
  ticketCounter: 'table',
  supportsStorageEngines: true,
  supportsNoPadCollation: true,
  supportsAddColumnIfNotExists: true,
  embedded: false,
  quote: (ident: string) => quoteIdent('mysql', ident),
  instance: instanceExpression('mysql'),
  leaseInstance: leaseInstanceExpression('mysql'),
} as const);

const POSTGRESQL: Engine = Object.freeze({
  name: 'PostgreSQL',
  version: '',
  recognizes: (version: string) => untestedServer('postgres', version) === undefined,
  sql: 'postgres',
  namespaces: 'schema',
  defaultSchema: DEFAULT_SCHEMA,
  nextId: 'function',
  ticketCounter: 'sequence',
  supportsStorageEngines: false,
  supportsNoPadCollation: false,
  supportsAddColumnIfNotExists: true,
  embedded: false,
  quote: (ident: string) => quoteIdent('postgres', ident),
  instance: instanceExpression('postgres'),
  leaseInstance: leaseInstanceExpression('postgres'),
} as const);

const PGLITE: Engine = Object.freeze({
  ...POSTGRESQL,
  name: 'PGlite',
  recognizes: (version: string) => /PGlite/.test(version),
  sql: 'pglite',
  embedded: true,
} as const);

/** The engines idlease is tested on, most specific first, per SQL family a driver can speak. */
const ENGINES: PerDialect<Engine[]> = { mysql: [MARIADB], postgres: [PGLITE, POSTGRESQL] };

/** The engine a driver's family stands for before the server is asked. */
const FAMILY_ENGINE: Readonly<Record<Flavor, Engine>> = { mysql: MARIADB, postgres: POSTGRESQL, pglite: PGLITE };

/**
 * Add an engine for servers of a family that `recognizes` accepts, asked before the built-in ones:
 * how a stand-in engine is tried (test/integration/engine-stand-in.test.ts). Returns its removal.
 */
export function registerEngine(engine: Engine): () => void {
  const list = perDialect(engine.sql, ENGINES);
  list.unshift(engine);
  return () => {
    const at = list.indexOf(engine);
    if (at >= 0) list.splice(at, 1);
  };
}

/**
 * The engine a family name stands for, without asking a server: for planning before a connection
 * exists (planMigrations('postgres'), a public signature) and for decisions made synchronously when
 * an allocator is built. The server's own answer, asked on the first statement, refuses what it is not.
 */
export function engineOfFamily(family: Flavor | Engine): Engine {
  return typeof family === 'string' ? FAMILY_ENGINE[family] : family;
}

/** The engine an executor's driver says it speaks, before the server is asked (synchronous; see engineOf). */
export function declaredEngine(db: SqlExecutor): Engine {
  return known.get(keyOf(db)) ?? FAMILY_ENGINE[db.flavor];
}

const VERSION_SQL: PerDialect<string> = { mysql: 'SELECT VERSION()', postgres: 'SELECT version()' };

/** The raw executor under servedBy's wrapper: the one the version is asked on (the wrapper would wait on itself). */
const RAW = Symbol('raw executor');
type Wrapped = SqlExecutor & { readonly [RAW]?: SqlExecutor };

const learning = new WeakMap<object, Promise<Engine>>();
const known = new WeakMap<object, Engine>();

/** Per handle (a pool, a knex client, a PGlite): every executor of one handle reaches the same server. */
const keyOf = (db: SqlExecutor): object => db.handle ?? (db as Wrapped)[RAW] ?? db;

/**
 * The engine behind an executor: one round trip on the first call for its handle, then the cached
 * answer. BAD_CONFIG when no engine idlease is tested on recognizes the server; a failure to ask
 * (the server is down) is not kept, so the next call asks again.
 */
export function engineOf(db: SqlExecutor): Promise<Engine> {
  const key = keyOf(db);
  const have = known.get(key);
  if (have) return Promise.resolve(have);
  let pending = learning.get(key);
  if (!pending) {
    pending = ask((db as Wrapped)[RAW] ?? db).then(
      (engine) => {
        known.set(key, engine);
        return engine;
      },
      (err: unknown) => {
        if (!(err instanceof IdleaseError)) learning.delete(key);
        throw err;
      },
    );
    learning.set(key, pending);
  }
  return pending;
}

async function ask(db: SqlExecutor): Promise<Engine> {
  const version = String((await db.run(perDialect(db.flavor, VERSION_SQL), [])).rows[0]?.[0] ?? '');
  const engine = perDialect(db.flavor, ENGINES).find((e) => e.recognizes(version));
  if (engine === undefined) {
    const why = untestedServer(db.flavor, version) ?? `no engine idlease knows recognizes it (version string '${version}')`;
    throw new IdleaseError('BAD_CONFIG', `idlease refused this server: ${why}. Point idlease at a server it is tested on.`);
  }
  return Object.freeze({ ...engine, version });
}

/**
 * A driver's executor whose first statement for its handle first asks the server what it is
 * (engineOf), so every entry point — allocators, migrate, the CLI, serve — refuses an untested
 * server before running a statement written for another. Afterwards a statement costs one map read.
 */
export function servedBy(raw: SqlExecutor): SqlExecutor {
  const key = keyOf(raw);
  const self: Wrapped = Object.freeze({
    flavor: raw.flavor,
    handle: key,
    [RAW]: raw,
    async run(text: string, values: readonly SqlValue[]): Promise<SqlResult> {
      if (!known.has(key)) await engineOf(self);
      return raw.run(text, values);
    },
    transaction<T>(work: (tx: SqlExecutor) => Promise<T>): Promise<T> {
      return raw.transaction((tx) => work(tx === raw ? self : servedBy(withHandle(tx, key))));
    },
  });
  return self;
}

/** A transaction's executor answers for the handle it came from. */
function withHandle(tx: SqlExecutor, handle: object): SqlExecutor {
  return tx.handle === handle
    ? tx
    : Object.freeze({ flavor: tx.flavor, handle, run: tx.run.bind(tx), transaction: tx.transaction.bind(tx) });
}
