/**
 * A lease holder in a process of its own, for the crash-failover figure: takes the lease, says
 * "held" on stdout, and keeps it (renewing) until the bench SIGKILLs it.
 */
import { openStore } from '../src/backends/index.js';
import { Leasehold } from '../src/core/leasehold.js';
import { K8sElector, pgRecords, redisRecords } from './k8s-elector.js';

export type HolderConfig =
  | { mode: 'leasehold'; url: string; name: string; ttl: number; liveness?: 'ttl' | 'session' }
  | { mode: 'k8s-postgres' | 'k8s-redis'; address: string; table?: string; name: string; ttl: number }
  | { mode: 'advisory'; address: string; key: number }
  | { mode: 'getlock'; lock: string }
  | { mode: 'election'; hosts: string; prefix: string; ttl: number };

const config = JSON.parse(process.argv[2]!) as HolderConfig;
const held = (): void => void process.stdout.write('held\n');

switch (config.mode) {
  case 'leasehold': {
    const lh = new Leasehold({ store: await openStore(config.url) });
    await lh.lease(config.name, { ttl: config.ttl, liveness: config.liveness ?? 'ttl' }).acquire();
    held();
    break;
  }
  case 'k8s-postgres':
  case 'k8s-redis': {
    const records = config.mode === 'k8s-postgres' ? await pgRecords(config.address, config.table) : await redisRecords(config.address);
    void new K8sElector(records, config.name, config.ttl).run(held);
    break;
  }
  case 'advisory': {
    const { default: pg } = await import('pg');
    const c = new pg.Client({ connectionString: config.address });
    await c.connect();
    await c.query('SELECT pg_advisory_lock($1)', [config.key]);
    held();
    setInterval(() => {}, 1 << 30);
    break;
  }
  case 'getlock': {
    const { namedLockClient } = await import('./peers.js');
    const c = await namedLockClient();
    await c.query('SELECT GET_LOCK(?, 10)', [config.lock]);
    held();
    setInterval(() => {}, 1 << 30);
    break;
  }
  case 'election': {
    const { Etcd3, Election } = await import('etcd3');
    const campaign = new Election(new Etcd3({ hosts: config.hosts }), config.prefix, Math.ceil(config.ttl / 1000)).campaign('holder');
    campaign.once('elected', held);
    break;
  }
}
