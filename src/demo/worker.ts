/**
 * One demo worker: contends for the demo lease and, while it believes it leads, loops over
 * units of work. A unit reads the token, "works" for a moment, then writes a row carrying that
 * token through the SQLite fence. It deliberately does NOT re-check the lease before writing:
 * a process frozen mid-unit resumes right at the write, and only the fence can stop it.
 *
 * Run by `leasehold demo` (forked, with an IPC channel that is used only to notice the demo
 * dying). Reports go to stdout as JSON lines (see protocol.ts).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { FencedError, NotLeaderError, errorMessage } from '../core/errors.js';
import { Leasehold } from '../core/leasehold.js';
import { fencedWriteSync } from '../fence/index.js';
import { openStore, resolveStoreUrl } from '../backends/index.js';
import { DEMO_TABLE, type Report } from './protocol.js';
import { openResource } from './resource.js';

type Body<R> = R extends Report ? Omit<R, 'worker' | 'at'> : never;

const { values } = parseArgs({
  options: {
    store: { type: 'string' },
    lease: { type: 'string' },
    resource: { type: 'string' },
    run: { type: 'string' },
    worker: { type: 'string' },
    ttl: { type: 'string', default: '2000' },
    renew: { type: 'string', default: '600' },
    'work-min': { type: 'string', default: '200' },
    'work-max': { type: 'string', default: '300' },
  },
  strict: true,
});

const worker = values.worker ?? '?';

function report(body: Body<Report>): void {
  // stdout is a pipe: writes to it are synchronous on Linux, so a report is out before exit.
  process.stdout.write(`${JSON.stringify({ ...body, worker, at: Date.now() })}\n`);
}
process.stdout.on('error', () => {}); // the demo went away; the disconnect handler stops us

async function main(): Promise<number> {
  // The store URL comes from LEASEHOLD_STORE when not given: a password stays out of `ps`.
  const url = resolveStoreUrl(values.store);
  const { lease: name, resource, run } = values;
  if (name === undefined || resource === undefined || run === undefined) {
    throw new Error('usage: worker.js [--store URL] --lease NAME --resource PATH --run RUN --worker ID');
  }
  const workMin = Number(values['work-min']);
  const workMax = Number(values['work-max']);

  // SIGTERM (the demo), SIGINT (Ctrl-C reaches the whole process group) and a lost IPC channel
  // (the demo died) all mean: finish the unit in hand, release, exit.
  const stop = new AbortController();
  const onStop = (): void => stop.abort();
  process.on('SIGTERM', onStop);
  process.on('SIGINT', onStop);
  process.on('disconnect', onStop);

  const db = openResource(resource);
  const insert = db.prepare(`INSERT INTO ${DEMO_TABLE} (run, worker, token, seq, at) VALUES (?, ?, ?, ?, ?)`);
  const store = await openStore(url);
  const lh = new Leasehold({ store, closeStore: true, holderLabel: `demo-${worker}` });
  lh.on('identity', (holder) => report({ type: 'identity', holder }));
  const lease = lh.lease(name, { ttl: Number(values.ttl), renewInterval: Number(values.renew) });
  lease.on('acquired', (term) => report({ type: 'acquired', token: String(term.token), holder: term.holder }));
  lease.on('lost', (term, err) => report({ type: 'lost', token: String(term.token), reason: err.reason }));
  lease.on('released', (term, handedOver) => report({ type: 'released', token: String(term.token), handedOver }));
  report({ type: 'ready', pid: process.pid, holder: lh.holder });

  let seq = 0;
  try {
    while (!stop.signal.aborted) {
      try {
        await lease.acquire({ signal: stop.signal });
      } catch (err) {
        if (stop.signal.aborted) break;
        throw err;
      }
      while (!stop.signal.aborted) {
        let token: bigint;
        try {
          token = lease.token; // the only leadership check a unit makes: at its start
        } catch (err) {
          if (err instanceof NotLeaderError) break; // lost the term: contend again
          throw err;
        }
        const mine = ++seq;
        report({ type: 'unit', token: String(token), seq: mine });
        // The work. No signal, no re-check: a worker frozen here wakes up and carries on.
        await sleep(workMin + Math.random() * (workMax - workMin));
        const leaseKnewLost = lease.currentTerm?.token !== token;
        try {
          const id = fencedWriteSync(db, { resource: name, token }, () => Number(insert.run(run, worker, token, mine, Date.now()).lastInsertRowid));
          report({ type: 'accepted', token: String(token), seq: mine, id });
        } catch (err) {
          if (err instanceof FencedError) {
            report({ type: 'fenced', token: String(token), seq: mine, highWater: err.highWater === null ? null : String(err.highWater), leaseKnewLost });
          } else {
            report({ type: 'write-error', token: String(token), seq: mine, message: errorMessage(err) });
          }
        }
      }
    }
  } finally {
    await lh.close(); // releases the lease if held, so a successor need not wait for expiry
    db.close();
    process.off('SIGTERM', onStop);
    process.off('SIGINT', onStop);
  }
  report({ type: 'stopped' });
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    report({ type: 'error', message: errorMessage(err) });
    process.exit(1);
  },
);
