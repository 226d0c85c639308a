import { packageRoot } from '../package-root.js';

/** The version in idlease's own package.json, read when asked so the CLI and the package can never disagree. */
export function packageVersion(): string {
  return packageRoot().version;
}
