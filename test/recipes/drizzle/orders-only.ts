// The same app schema without the sequence declaration: what a user writes first.
export { orders } from './orders-next-id-public.js';
