/**
 * What a snowflake worker process (test/stress/, test/partition/) is started with: its JSON
 * config as argv[2], and SIGTERM as "finish the batch in hand, then close".
 */
export interface SnowflakeWorkerConfig {
  readonly url: string;
  readonly out: string;
  readonly leaseTtlMs: number;
  readonly maxLeadMs: number;
  readonly waitTimeoutMs: number;
}

export function snowflakeWorkerArgs(): { cfg: SnowflakeWorkerConfig; stopping: () => boolean } {
  let stopping = false;
  process.on('SIGTERM', () => (stopping = true));
  return { cfg: JSON.parse(process.argv[2] ?? '{}') as SnowflakeWorkerConfig, stopping: () => stopping };
}
