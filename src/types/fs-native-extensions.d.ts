// The one call idlease uses; the package ships no types.
declare module 'fs-native-extensions' {
  /** An exclusive (or shared) lock on the open file `fd`, without waiting: false when another holds it. */
  export function tryLock(fd: number, options?: { shared?: boolean }): boolean;
  const fsx: { tryLock: typeof tryLock };
  export default fsx;
}
