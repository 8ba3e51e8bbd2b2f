import pg from 'pg';
import { openStore } from './dist/src/backends/index.js';
import { Leasehold } from './dist/src/core/leasehold.js';
const url = 'postgres://root@127.0.0.1:5432/test';
const c = new pg.Client(url); await c.connect();
const row = async () => (await c.query("select holder, token, waiter, waiter_until > now() as wlive from leasehold.leases where name='wd-x'")).rows[0];
await c.query("delete from leasehold.leases where name='wd-x'");
const s1 = await openStore(url); const s2 = await openStore(url);
const l1 = new Leasehold({ store: s1 }); const l2 = new Leasehold({ store: s2 });
const a = l1.lease('wd-x', { ttl: 1000 }); await a.acquire();
console.log('held', await row());
const b = l2.lease('wd-x', { ttl: 1000 });
try { await b.acquire({ wait: 1500 }); console.log('b acquired?!'); } catch (e) { console.log('b:', e.message.slice(0, 80)); }
console.log('after b gave up', await row());
await a.release();
console.log('after a release', await row());
await l1.close(); await l2.close(); await s1.close(); await s2.close(); await c.end();
