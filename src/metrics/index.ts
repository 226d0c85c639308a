/**
 * `idlease/metrics`: export allocators' metrics with prom-client. `remoteLeaseCounter` stays
 * behind this face: only `idlease serve` hands out remote leases.
 */
export { collectMetrics, type Observable } from './collect.js';
export { grafanaDashboard, dashboardQueries } from './dashboard.js';
