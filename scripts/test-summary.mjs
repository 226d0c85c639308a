// Summarise the JSON reports of `npm test` (test-results/vitest-unit.json from the unit run,
// test-results/vitest.json from the rest; or the files named): totals, and tests per database (by
// the flavor a test's name or file names), so a run shows that MariaDB, PostgreSQL and PGlite
// were all exercised.
import { readFileSync } from 'node:fs';

const files = process.argv.length > 2 ? process.argv.slice(2) : ['test-results/vitest-unit.json', 'test-results/vitest.json'];
const report = { testResults: files.flatMap((f) => JSON.parse(readFileSync(f, 'utf8')).testResults) };
const buckets = { MariaDB: 0, PostgreSQL: 0, PGlite: 0, 'no database (unit)': 0, 'unnamed database': 0 };
const unnamed = [];
let passed = 0;
let failed = 0;
let skipped = 0;
for (const file of report.testResults) {
  for (const t of file.assertionResults) {
    if (t.status === 'passed') passed++;
    else if (t.status === 'failed') failed++;
    else skipped++;
    const text = `${file.name} ${t.fullName}`.toLowerCase();
    if (/\/test\/unit\//.test(file.name)) {
      buckets['no database (unit)']++;
      continue;
    }
    let hit = false;
    if (/pglite/.test(text)) {
      buckets.PGlite++;
      hit = true;
    }
    if (/mysql|mariadb|innodb|myisam/.test(text)) {
      buckets.MariaDB++;
      hit = true;
    }
    if (/postgres(?!.*pglite)|postgresql/.test(text.replace(/pglite/g, ''))) {
      buckets.PostgreSQL++;
      hit = true;
    }
    if (!hit) {
      buckets['unnamed database']++;
      unnamed.push(t.fullName);
    }
  }
}
console.log('tests per database (a test may count for more than one):');
for (const [k, v] of Object.entries(buckets)) console.log(`  ${k}: ${v}`);
for (const name of unnamed) console.log(`  (unnamed: ${name})`);
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
if (skipped > 0) {
  console.error('skipped tests are not allowed: a database-backed test must fail, not skip');
  process.exit(1);
}
