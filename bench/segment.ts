// Placeholder: filled in by the segment issue.
export default async function run(): Promise<void> {
  console.log('(not written yet)');
}
