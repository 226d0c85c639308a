/**
 * A vitest reporter for CI: when IDLEASE_GROUP_MARKS names a directory, the first test file of
 * each project to start leaves an empty file named for the project there. `.ci/run` waits for
 * `alone` to start the PostgreSQL version matrix beside the one-at-a-time group, whose files leave
 * much of the two cores idle (most wait on leases, cuts and timers), at a lower CPU priority.
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
