/**
 * `node --import <this>`: any attempt to load knex (or knex-pglite) in this process fails, so a
 * child that completes has shown it ran without knex. Checked on the specifier and on where it resolved.
 */
import { register } from 'node:module';

const hooks = `
const forbidden = (s) => s === 'knex' || s.startsWith('knex/') || s === 'knex-pglite' || /\\/node_modules\\/knex(-pglite)?\\//.test(s);
export async function resolve(specifier, context, next) {
  if (forbidden(specifier)) throw new Error('knex was loaded: ' + specifier + ' from ' + context.parentURL);
  const out = await next(specifier, context);
  if (forbidden(out.url)) throw new Error('knex was loaded: ' + out.url + ' from ' + context.parentURL);
  return out;
}`;
register(`data:text/javascript,${encodeURIComponent(hooks)}`);
