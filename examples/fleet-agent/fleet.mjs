// node fleet.mjs place|owner|reassign RESOURCE [FROM]: the client side of the fleet registry.
import { openStore, OwnerDeadError, NoOwnerError } from 'leasehold';
import { openFleet } from 'leasehold/fleet';

const [cmd, resource, from] = process.argv.slice(2);
const store = await openStore(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test');
const fleet = await openFleet(store);
try {
  if (cmd === 'place') {
    const p = await fleet.place(resource, { labels: { zone: 'eu' } });
    console.log(`placed ${p.resource} on ${p.agent} generation ${p.generation}`);
  } else if (cmd === 'reassign') {
    const p = await fleet.reassign(resource, { from });
    console.log(`moved ${p.resource} to ${p.agent} generation ${p.generation}`);
  } else {
    const o = await fleet.owner(resource);
    console.log(`${o.resource} owner ${o.agent} generation ${o.generation} live`);
  }
} catch (e) {
  if (e instanceof OwnerDeadError) console.log(`${resource} owner is dead: ${e.message}`);
  else if (e instanceof NoOwnerError) console.log(`${resource} has no owner`);
  else throw e;
  process.exitCode = e instanceof OwnerDeadError ? 5 : 4;
} finally {
  await store.close();
}
