/** docs/recipes/drizzle.md, run as written against PostgreSQL and MariaDB: the page asserts what it shows. */
import { afterAll } from 'vitest';
import { removeSharedModules } from '../docs/run-block.js';
import { describeDocFile } from '../docs/run-file.js';

afterAll(() => removeSharedModules());
describeDocFile('docs/recipes/drizzle.md');
