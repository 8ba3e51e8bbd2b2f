// The library on PostgreSQL: migrate, run a key once ever (runOncePer), and a schedule once per slot (startCron).
import { openStore } from 'leasehold';
import { runOncePer, startCron, everySchedule, openScheduling } from 'leasehold/scheduler';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const key = process.argv[2] ?? 'report-2026-03';

// The schema once, before the first lease (idempotent: every replica may call it).
const store = await openStore(url);
await store.migrate();
await store.close();

const { leasehold, ledger, close } = await openScheduling({ store: url });
const r = await runOncePer(key, async ({ token }) => token, { leasehold, ledger, name: 'monthly-report' });
console.log(r.ran ? `ran ${key} with token ${r.token}` : `${key} already ${r.record.status} (token ${r.record.token})`);

const cron = startCron(leasehold, ledger, 'tick', { schedule: everySchedule(1000), ttl: '3s' }, ({ slot, token }) => {
  console.log(`slot ${slot} token ${token}`);
});
await new Promise((resolve) => setTimeout(resolve, Number(process.env.RUN_FOR_MS ?? 3000)));
await cron.stop();
await close();
