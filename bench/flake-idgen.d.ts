// flake-idgen ships no types; only what bench/snowflake.ts calls.
declare module 'flake-idgen' {
  export default class FlakeId {
    constructor(options?: { id?: number; datacenter?: number; worker?: number; epoch?: number });
    /** Throws when the millisecond's sequence is used up and no callback is given. */
    next(): Buffer;
  }
}
