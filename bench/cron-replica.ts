/**
 * One `startCron` replica in a process of its own, for the cron-failover figure. Every store
 * request it makes (lease store and slot ledger calls alike, renewals included) is counted, and
 * the count printed every 200 ms, so that the bench still has it after a SIGKILL. "ran SLOT"
 * after each slot this replica completed; "fire MS" when it sends a contender's claim; "start
 * SLOT_MS MS" as its job starts; with `trace`, "call METHOD SENT_MS ANSWERED_MS" for each store
 * and ledger call (this host's clock, fractional ms), for where a winner's milliseconds go.
 */
import { openSlotLedger, openStore } from '../src/backends/index.js';
import { Leasehold } from '../src/core/leasehold.js';
import { startCron, type CronMode } from '../src/scheduler/cron.js';
import { everySchedule } from '../src/scheduler/schedule.js';
import { setTimeout as sleep } from 'node:timers/promises';

export interface CronReplicaConfig {
  url: string;
  name: string;
  mode: CronMode;
  ttl: number;
  periodMs: number;
  /** Print every store and ledger call's send and answer times. */
  trace?: boolean;
  /** Run this cron-replica.js instead (another build's: bench/cron-released-since.ts --base). */
  replicaJs?: string;
  /** Strip ClaimRequest.unlessReleasedSince from every claim: a store that does not honour it (the "before" of bench/cron-released-since.ts). */
  ignoreReleasedSince?: boolean;
  /** The schedule's liveness (bench/cron-midjob.ts: 'session' against 'ttl'). */
  liveness?: 'ttl' | 'session';
  /** How long each job runs (default: it returns at once), so that a replica can die mid-job. */
  jobMs?: number;
}

const config = JSON.parse(process.argv[2]!) as CronReplicaConfig;
const nowMs = (): number => performance.timeOrigin + performance.now();
let requests = 0;
/** Per method, and per method whose promise rejected: where a slot's requests go. */
const byMethod: Record<string, number> = {};

/** Counts each method call of `target` as one request (a transaction or script is one). */
function counted<T extends object>(target: T, tag: string): T {
  return new Proxy(target, {
    get(t, prop) {
      // A store that does not honour it says so (LeasePort.honoursReleasedSince).
      if (config.ignoreReleasedSince === true && tag === 'store' && prop === 'honoursReleasedSince') return undefined;
      const v: unknown = Reflect.get(t, prop, t);
      if (typeof v !== 'function' || prop === 'constructor') return v;
      return (...args: unknown[]) => {
        if (config.ignoreReleasedSince === true && tag === 'store' && prop === 'claim') args[0] = (args[0] as Array<Record<string, unknown>>).map(({ unlessReleasedSince: _u, ...q }) => q);
        // A contender's claim (no nonce expected): this replica's fire for a slot, by this
        // host's clock, for how long after the first replica's fire the winner's job starts.
        // Taken before the call: SQLite's run inside it, before it returns.
        if (tag === 'store' && prop === 'claim' && (args[0] as Array<{ expect: unknown }> | undefined)?.[0]?.expect === null) process.stdout.write(`fire ${nowMs()}\n`);
        const sent = performance.now();
        const r: unknown = (v as (...a: unknown[]) => unknown).apply(t, args);
        if (r instanceof Promise) {
          requests++;
          const m = `${tag}.${String(prop)}`;
          byMethod[m] = (byMethod[m] ?? 0) + 1;
          // Round trips (ms, summed), for the lateness a slot's winner should stay within.
          void r
            .finally(() => {
              byMethod[`ms:${m}`] = (byMethod[`ms:${m}`] ?? 0) + (performance.now() - sent);
              if (config.trace === true) process.stdout.write(`call ${m} ${performance.timeOrigin + sent} ${nowMs()}\n`);
            })
            .catch(() => undefined);
          r.catch((e: unknown) => {
            const k = `${m}!${e instanceof Error ? e.name : 'error'}`;
            byMethod[k] = (byMethod[k] ?? 0) + 1;
          });
        }
        return r;
      };
    },
  });
}

const store = await openStore(config.url);
const ledger = counted(await openSlotLedger(store, config.url), 'ledger');
const lh = new Leasehold({ store: counted(store, 'store') });
const options = { schedule: everySchedule(config.periodMs), ttl: config.ttl, mode: config.mode, ...(config.liveness === undefined ? {} : { liveness: config.liveness, onInterrupted: 'rerun' as const }) };
startCron(lh, ledger, config.name, options, async (ctx) => {
  process.stdout.write(`start ${ctx.slotAtMs} ${nowMs()}\n`);
  // Ends early when the term does: the slot is then recorded interrupted, as a real job's would.
  if (config.jobMs !== undefined) await sleep(config.jobMs, undefined, { signal: ctx.signal }).catch(() => undefined);
}).on('slot', (e) => {
  if (e.event === 'succeeded') process.stdout.write(`ran ${e.slot}\n`);
});
setInterval(() => void process.stdout.write(`requests ${requests} ${JSON.stringify(byMethod)}\n`), 200);
process.stdout.write('up\n');
