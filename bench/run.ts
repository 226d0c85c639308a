/**
 * `npm run bench [-- segment|tickets|next-id]`: every benchmark reports ratios against a
 * baseline measured in the same run, on the same machine.
 */
const suites: Record<string, () => Promise<{ default: () => Promise<void> }>> = {
  segment: () => import('./segment.js'),
  tickets: () => import('./tickets.js'),
  'next-id': () => import('./next-id.js'),
};

const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const names = wanted.length > 0 ? wanted : Object.keys(suites);
for (const name of names) {
  const load = suites[name];
  if (!load) {
    console.error(`unknown bench ${JSON.stringify(name)}; choose from ${Object.keys(suites).join(', ')}`);
    process.exit(2);
  }
  console.log(`\n## ${name}\n`);
  await (await load()).default();
}
