// Placeholder: filled in by the tickets issue.
export default async function run(): Promise<void> {
  console.log('(not written yet)');
}
