/**
 * A Grafana dashboard over the metrics idlease exports (allocators in an app through
 * collectMetrics, and `idlease serve`'s own), as importable JSON: `idlease dashboard > idlease.json`,
 * then Grafana → Dashboards → Import. Every query names only families this package registers, and
 * test/integration/dashboard.test.ts runs each one through a live Prometheus scraping a serve and a
 * library app: each must return data. Built from one table so a panel is one line.
 */

/** Grafana's own interval for rate(): at least four scrape intervals. */
const RATE = '$__rate_interval';

interface PanelSpec {
  readonly title: string;
  readonly expr: string;
  /** Legend: Grafana's {{label}} template. */
  readonly legend: string;
  readonly unit: string;
  readonly description: string;
}

interface RowSpec {
  readonly title: string;
  readonly panels: readonly PanelSpec[];
}

const ROWS: readonly RowSpec[] = [
  {
    title: 'Segments',
    panels: [
      {
        title: 'IDs per second, per tag',
        expr: `sum by (tag) (rate(idlease_segment_ids_served_total[${RATE}]))`,
        legend: '{{tag}}',
        unit: 'ops',
        description: 'IDs handed out from memory, summed over every process.',
      },
      {
        title: 'Leases per second, per tag',
        expr: `sum by (tag) (rate(idlease_segment_leases_total[${RATE}]))`,
        legend: '{{tag}}',
        unit: 'ops',
        description: 'Database statements: one per step IDs. The step policy aims at one lease per targetLeaseMs.',
      },
      {
        title: 'Lease latency p99, per tag',
        expr: `histogram_quantile(0.99, sum by (tag, le) (rate(idlease_segment_lease_duration_seconds_bucket[${RATE}])))`,
        legend: '{{tag}}',
        unit: 's',
        description: 'How long the lease statement took (the preload hides it from callers while it stays under the runway).',
      },
      {
        title: 'IDs left in memory, per tag',
        expr: 'sum by (tag) (idlease_segment_remaining_ids)',
        legend: '{{tag}}',
        unit: 'short',
        description: 'Current and preloaded segment, summed over processes.',
      },
      {
        title: 'Time to exhaustion at the current rate (runway), per tag',
        expr: 'min by (tag) (idlease_segment_runway_seconds)',
        legend: '{{tag}}',
        unit: 's',
        description: 'The process that runs out first. IdleaseRunwayLow fires when it is under a minute and leases fail.',
      },
      {
        title: 'Failover jumps, per tag',
        expr: 'sum by (tag) (idlease_segment_failover_jumps_total)',
        legend: '{{tag}}',
        unit: 'short',
        description: 'Leases that found the row last served by another database instance and jumped it by its failover gap.',
      },
      {
        title: 'Lease errors by code',
        expr: `sum by (code) (rate(idlease_segment_lease_errors_total[${RATE}]))`,
        legend: '{{code}}',
        unit: 'ops',
        description: 'Failed leases (each retried). IdleaseLeaseErrors and IdleaseCallsFailing watch these.',
      },
    ],
  },
  {
    title: 'Tickets',
    panels: [
      {
        title: 'IDs per second, per ticket server',
        expr: `sum by (server) (rate(idlease_ticket_ids_served_total[${RATE}]))`,
        legend: '{{server}}',
        unit: 'ops',
        description: 'Draws per server; a server that stops drawing has its share taken by the others.',
      },
      {
        title: 'Ticket servers up',
        expr: 'min by (server) (idlease_ticket_server_up)',
        legend: '{{server}}',
        unit: 'short',
        description: '1 when the last draw or probe succeeded. IdleaseTicketServerDown fires on 0.',
      },
    ],
  },
  {
    title: 'Snowflake',
    panels: [
      {
        title: 'Worker ids held',
        expr: 'max by (group, instance) (idlease_snowflake_worker_id)',
        legend: '{{instance}} {{group}}',
        unit: 'short',
        description: 'The worker id each process holds (-1: none).',
      },
      {
        title: 'Worker-id lease valid',
        expr: 'min by (group, instance) (idlease_snowflake_lease_valid)',
        legend: '{{instance}} {{group}}',
        unit: 'short',
        description: '1 while the lease is confirmed by the database. IdleaseSnowflakeNoLease and IdleaseSnowflakeLeaseLost watch it.',
      },
      {
        title: 'IDs per second',
        expr: `sum by (group) (rate(idlease_snowflake_ids_issued_total[${RATE}]))`,
        legend: '{{group}}',
        unit: 'ops',
        description: 'IDs made in memory.',
      },
    ],
  },
  {
    title: 'Redis sequence',
    panels: [
      {
        title: 'Windows leased per second, per tag',
        expr: `sum by (tag) (rate(idlease_redis_windows_total[${RATE}]))`,
        legend: '{{tag}}',
        unit: 'ops',
        description: 'Windows leased from the database and installed in Redis.',
      },
      {
        title: 'IDs left in the Redis windows, per tag',
        expr: 'min by (tag) (idlease_redis_left_ids)',
        legend: '{{tag}}',
        unit: 'short',
        description: 'What Redis can hand out before the next window lease.',
      },
      {
        title: 'Redis IDs per second, per tag',
        expr: `sum by (tag) (rate(idlease_redis_ids_served_total[${RATE}]))`,
        legend: '{{tag}}',
        unit: 'ops',
        description: 'One order across every process.',
      },
    ],
  },
  {
    title: 'serve',
    panels: [
      {
        title: 'Open connections',
        expr: 'sum by (instance) (idlease_serve_connections)',
        legend: '{{instance}}',
        unit: 'short',
        description: 'HTTP connections open on idlease serve.',
      },
      {
        title: 'Connections shed and requests refused, by reason',
        expr: `sum by (reason) (rate(idlease_serve_connections_shed_total[${RATE}])) or sum by (reason) (rate(idlease_serve_refused_total[${RATE}]))`,
        legend: '{{reason}}',
        unit: 'ops',
        description: 'What the edge bounds turned away.',
      },
      {
        title: 'Authentication failures',
        expr: `sum by (result) (rate(idlease_serve_auth_failures_total[${RATE}]))`,
        legend: '{{result}}',
        unit: 'ops',
        description: 'Wrong or missing tokens, and those limited.',
      },
      {
        title: 'Bytes held for slow readers',
        expr: 'sum by (instance) (idlease_serve_held_bytes)',
        legend: '{{instance}}',
        unit: 'bytes',
        description: 'Answers written but not yet read by their clients.',
      },
    ],
  },
  {
    title: 'Alerts',
    panels: [
      {
        title: 'idlease alerts firing',
        // ALERTS has no series while nothing fires: the vector(0) keeps the panel drawn at 0.
        expr: 'sum by (alertname) (ALERTS{alertname=~"Idlease.*", alertstate="firing"}) or on() vector(0)',
        legend: '{{alertname}}',
        unit: 'short',
        description: 'The rules of docs/serve.md, as Prometheus evaluates them.',
      },
    ],
  },
];

/** Every panel's query, for the test that runs them through Prometheus. */
export function dashboardQueries(): Array<{ title: string; expr: string }> {
  return ROWS.flatMap((r) => r.panels.map((p) => ({ title: p.title, expr: p.expr })));
}

/** The dashboard as Grafana's import format, with the Prometheus data source asked for at import. */
export function grafanaDashboard(): Record<string, unknown> {
  const ds = { type: 'prometheus', uid: '${DS_PROMETHEUS}' };
  const panels: Array<Record<string, unknown>> = [];
  let id = 1;
  let y = 0;
  for (const row of ROWS) {
    panels.push({ id: id++, type: 'row', title: row.title, collapsed: false, gridPos: { h: 1, w: 24, x: 0, y }, panels: [] });
    y += 1;
    row.panels.forEach((p, i) => {
      panels.push({
        id: id++,
        type: 'timeseries',
        title: p.title,
        description: p.description,
        datasource: ds,
        gridPos: { h: 8, w: 8, x: (i % 3) * 8, y: y + Math.floor(i / 3) * 8 },
        fieldConfig: { defaults: { unit: p.unit }, overrides: [] },
        options: { legend: { displayMode: 'list', placement: 'bottom', showLegend: true }, tooltip: { mode: 'multi' } },
        targets: [{ refId: 'A', datasource: ds, expr: p.expr, legendFormat: p.legend }],
      });
    });
    y += Math.ceil(row.panels.length / 3) * 8;
  }
  return {
    __inputs: [{ name: 'DS_PROMETHEUS', label: 'Prometheus', type: 'datasource', pluginId: 'prometheus', pluginName: 'Prometheus' }],
    __requires: [
      { type: 'grafana', id: 'grafana', name: 'Grafana', version: '10.0.0' },
      { type: 'datasource', id: 'prometheus', name: 'Prometheus', version: '1.0.0' },
      { type: 'panel', id: 'timeseries', name: 'Time series', version: '' },
    ],
    title: 'idlease',
    uid: 'idlease',
    description: 'IDs, leases, runway, failover jumps, errors, serve bounds, worker ids and Redis windows (idlease dashboard).',
    tags: ['idlease'],
    timezone: 'browser',
    schemaVersion: 39,
    version: 1,
    refresh: '30s',
    time: { from: 'now-1h', to: 'now' },
    templating: { list: [] },
    annotations: { list: [] },
    panels,
  };
}
