import { existsSync } from 'node:fs';
import path from 'node:path';

/**
 * A worker process stops when its stop file appears, or when its directory is gone: a test that
 * failed writes the stop file and removes the directory at once, and a worker that had not yet
 * looked would otherwise run on, orphaned, loading the machine for every test after it.
 */
export function stopRequested(stopFile: string): boolean {
  return existsSync(stopFile) || !existsSync(path.dirname(stopFile));
}
