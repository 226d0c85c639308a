// Types of scripts/ensure-pg-versions.mjs for the TypeScript that imports it (test/pg-versions/run.ts).
export declare const PG_VERSIONS: Readonly<Record<14 | 16 | 17 | 18, string>>;
export declare function pgVersionsDir(env?: NodeJS.ProcessEnv): string;
export declare function pgBinDir(major: number, env?: NodeJS.ProcessEnv): string;
/** Installs every pinned major that is missing; returns { major: bin dir }. */
export declare function ensurePgVersions(majors?: readonly number[]): Record<number, string>;
