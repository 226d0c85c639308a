/**
 * Issue 13: idlease on a 3-node MariaDB Galera cluster (test/helpers/galera.ts), one cluster
 * for the whole file:
 *   - the cluster forms and replicates (wall time of the file: see the last test);
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGalera, type GaleraCluster } from '../helpers/galera.js';

let cluster: GaleraCluster;
beforeAll(async () => {
  cluster = await startGalera();
}, 120_000);
afterAll(async () => {
  await cluster?.destroy();
});

describe('MariaDB Galera (HA)', () => {
  it('three nodes form one cluster and replicate writes', async () => {
    for (const i of [0, 1, 2]) expect(cluster.sql(i, "SHOW STATUS LIKE 'wsrep_cluster_size'")).toMatch(/\t3$/m);
    cluster.sql(0, 'CREATE TABLE test.smoke (id int PRIMARY KEY); INSERT INTO test.smoke VALUES (1)');
    expect(cluster.sql(2, 'SET SESSION wsrep_sync_wait = 1; SELECT COUNT(*) FROM test.smoke').trim()).toBe('1');
    cluster.sql(0, 'DROP TABLE test.smoke');
  });
});
