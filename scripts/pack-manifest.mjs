// `npm pack` / `npm publish` only: the published manifest carries no install-time script.
// `prepare` builds dist/ in a clone (`npm ci`, `npm install`), where it belongs; in an app that
// installs the package it would be a script npm asks the user to allow (npm 11's allowScripts)
// and that has nothing to build. So prepack builds dist/ and takes `prepare` out of
// package.json before npm reads it for the tarball; postpack puts the file back as it was.
// A pack that dies between the two leaves package.json.prepack beside it: postpack (or
// `node scripts/pack-manifest.mjs postpack`) restores it.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs';

const manifest = new URL('../package.json', import.meta.url);
const saved = new URL('../package.json.prepack', import.meta.url);
const step = process.argv[2];

if (step === 'prepack') {
  const build = spawnSync(process.execPath, [new URL('./prepare.mjs', import.meta.url).pathname], { stdio: 'inherit' });
  if (build.status !== 0) process.exit(build.status ?? 1);
  const text = existsSync(saved) ? readFileSync(saved, 'utf8') : readFileSync(manifest, 'utf8');
  const pkg = JSON.parse(text);
  if (!existsSync(saved)) {
    writeFileSync(saved, text);
    // The restored package.json keeps its time: a pack does not make dist/ look older than it.
    const { atime, mtime } = statSync(manifest);
    utimesSync(saved, atime, mtime);
  }
  delete pkg.scripts.prepare;
  writeFileSync(manifest, JSON.stringify(pkg, null, 2) + '\n');
} else if (step === 'postpack') {
  if (existsSync(saved)) renameSync(saved, manifest);
} else {
  process.stderr.write('usage: node scripts/pack-manifest.mjs prepack|postpack\n');
  process.exit(2);
}
