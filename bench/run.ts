/**
 * `npm run bench [-- segment|tickets|next-id|next-id-mariadb|next-id-cost|next-id-uuidv7|serve|serve-metrics|snowflake|cli|redis]`: every benchmark reports ratios
 * against a baseline measured in the same run, on the same machine. Without a name: the three
 * timed suites (next-id-cost counts instructions under valgrind and is asked for by name).
 */
const suites: Record<string, () => Promise<{ default: () => Promise<void> }>> = {
  segment: () => import('./segment.js'),
  tickets: () => import('./tickets.js'),
  'next-id': () => import('./next-id.js'),
  'next-id-mariadb': () => import('./next-id-mariadb.js'),
  'next-id-cost': () => import('./next-id-cost.js'),
  'next-id-uuidv7': () => import('./next-id-uuidv7.js'),
  serve: () => import('./serve.js'),
  'serve-metrics': () => import('./serve-metrics.js'),
  snowflake: () => import('./snowflake.js'),
  cli: () => import('./cli.js'),
  redis: () => import('./redis.js'),
};
const byDefault = ['segment', 'tickets', 'next-id'];

const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const names = wanted.length > 0 ? wanted : byDefault;
for (const name of names) {
  const load = suites[name];
  if (!load) {
    console.error(`unknown bench ${JSON.stringify(name)}; choose from ${Object.keys(suites).join(', ')}`);
    process.exit(2);
  }
  console.log(`\n## ${name}\n`);
  await (await load()).default();
}
