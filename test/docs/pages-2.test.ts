/** Share 2 of README.md and docs/*.md run as written (test/docs/samples.test.ts says how; run-file.ts's docShare which). */
import { afterAll } from 'vitest';
import { removeSharedModules } from './run-block.js';
import { describeDocFile, docShare, PAGE_SHARES } from './run-file.js';

afterAll(() => removeSharedModules());
for (const file of docShare(2, PAGE_SHARES)) describeDocFile(file);
