// A fleet agent: alive while its lease `agent/ID` is unexpired by the store's clock.
import { Leasehold, openStore } from 'leasehold';
import { Agent, openFleet } from 'leasehold/fleet';

const [id = 'web-1', zone = 'eu'] = process.argv.slice(2);
const store = await openStore(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test');
const leasehold = new Leasehold({ store, closeStore: true });
const fleet = await openFleet(store);
const agent = await Agent.start(leasehold, fleet, { id, labels: { zone }, heartbeat: process.env.HEARTBEAT ?? '10s', staleAfter: process.env.STALE_AFTER ?? '30s' });
console.log(`agent ${id} live`);
process.once('SIGTERM', async () => {
  await agent.stop(); // deregisters: its resources read as owner-dead at once
  await leasehold.close();
});
