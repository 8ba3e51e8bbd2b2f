/**
 * One every-second `startCron` replica in a process of its own, for the retention figure: each
 * ledger call's duration (claim, complete, skip, interruptStale) and each lease-store call's
 * (acquire, release, renew) printed as "call NAME MS WALLMS", so the bench can tell the calls
 * made while a prune ran from the others. Its own process, as `leasehold prune` would be: a
 * SQLite prune's synchronous batches must not be charged to this replica's event loop.
 */
import { openSlotLedger, openStore } from '../src/backends/index.js';
import { Leasehold } from '../src/core/leasehold.js';
import { startCron } from '../src/scheduler/cron.js';
import { everySchedule } from '../src/scheduler/schedule.js';

const { url, name } = JSON.parse(process.argv[2]!) as { url: string; name: string };

function timed<T extends object>(target: T): T {
  return new Proxy(target, {
    get(t, prop) {
      const v: unknown = Reflect.get(t, prop, t);
      if (typeof v !== 'function' || prop === 'constructor') return v;
      return (...args: unknown[]) => {
        const t0 = performance.now();
        const r: unknown = (v as (...a: unknown[]) => unknown).apply(t, args);
        if (r instanceof Promise) void r.then(() => process.stdout.write(`call ${String(prop)} ${(performance.now() - t0).toFixed(2)} ${Date.now()}\n`), () => undefined);
        return r;
      };
    },
  });
}

const store = await openStore(url);
const ledger = timed(await openSlotLedger(store, url));
const lh = new Leasehold({ store: timed(store) });
const cron = startCron(lh, ledger, name, { schedule: everySchedule(1000), ttl: '3s', catchUpWindow: '1h' }, () => undefined);
cron.on('slot', (e) => {
  if (e.event === 'started') process.stdout.write(`late ${e.delayMs} ${Date.now()}\n`);
});
process.stdout.write('up\n');
process.on('SIGTERM', () => void cron.stop().then(() => lh.close()).then(() => process.exit(0)));
