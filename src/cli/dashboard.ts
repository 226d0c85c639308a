import type { Command } from 'commander';
import { grafanaDashboard } from '../metrics/dashboard.js';

/** `idlease dashboard`: the Grafana dashboard over idlease's metrics, as JSON to import. */
export function registerDashboardCommand(program: Command): void {
  program
    .command('dashboard')
    .description('print a Grafana dashboard (JSON to import) over the metrics of apps and idlease serve')
    .addHelpText(
      'after',
      `
Example:
  idlease dashboard > idlease-dashboard.json     # Grafana → Dashboards → Import; pick your Prometheus`,
    )
    .action(() => {
      process.stdout.write(JSON.stringify(grafanaDashboard(), null, 2) + '\n');
    });
}
