/**
 * A vitest reporter for CI: when IDLEASE_GROUP_MARKS names a directory, the first test file of
 * each project to start leaves an empty file named for the project there. `.ci/run` waits for
 * the first database group (`shared`, `failover` or `alone`) to start the PostgreSQL version
 * matrix beside it at a lower CPU priority, in the part of the two cores those files leave idle
 * while they wait on servers, child processes, leases and timers.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

export function groupMarks(dir: string | undefined): Reporter[] {
  if (!dir) return [];
  const marked = new Set<string>();
  return [
    {
      onTestModuleStart(module: TestModule) {
        const project = module.project.name;
        if (marked.has(project)) return;
        marked.add(project);
        writeFileSync(path.join(dir, project), '');
      },
    },
  ];
}
