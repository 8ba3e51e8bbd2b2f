// node-cron 4 with the leasehold run coordinator: the one option that makes a schedule run once per slot.
import cron from 'node-cron';
import { leaseholdCoordinator } from 'leasehold/node-cron';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const coordinator = leaseholdCoordinator({ store: url }, { ttl: '5s' });

const task = cron.schedule(
  '* * * * * *',
  async (ctx) => {
    const { slot, token } = coordinator.slot(ctx); // fence writes with token
    console.log(`slot ${slot} token ${token}`);
  },
  { name: 'report', distributed: true, runCoordinator: coordinator },
);
coordinator.watch(task); // contend now, and record a job that throws as failed

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.once(signal, async () => {
    await task.stop();
    await coordinator.close();
  });
}
