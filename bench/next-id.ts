// Placeholder: filled in by the next-id issue.
export default async function run(): Promise<void> {
  console.log('(not written yet)');
}
