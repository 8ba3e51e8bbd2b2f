/**
 * One replica of a peer scheduler in a process of its own, for the cron-failover figure's
 * baseline rows (issue 33's table): what a user would pick instead of `startCron`, on the same
 * Redis, firing every second.
 *  - 'bullmq': a BullMQ Worker on a queue whose job scheduler (`upsertJobScheduler`, pattern
 *    every second) every replica upserts at start, as an app's replicas would.
 *  - 'node-cron': node-cron 4 with `distributed: true` and a run coordinator that claims each
 *    fire with one `SET key NX PX` (a key per slot, so every replica's fire of it meets the same key).
 * Every Redis command this process sends (ioredis's `sendCommand`, which pipelines and scripts
 * go through: a script is one command, a pipeline of n is n) is counted and printed every
 * 200 ms, so that the bench still has the count after a SIGKILL. "ran SLOT_MS START_MS" when
 * this replica's job starts (the slot's time, and this host's wall clock then).
 */
import { Redis } from 'ioredis';

export interface PeerReplicaConfig {
  peer: 'bullmq' | 'node-cron';
  redisUrl: string;
  /** Every key this replica writes starts with it (the bench deletes them at the end). */
  prefix: string;
}

const config = JSON.parse(process.argv[2]!) as PeerReplicaConfig;
let commands = 0;
// Counted on the prototype: BullMQ duplicates its connection (the blocking one) internally.
const proto = Redis.prototype as unknown as { sendCommand: (...a: unknown[]) => unknown };
const send = proto.sendCommand;
proto.sendCommand = function (this: unknown, ...args: unknown[]): unknown {
  commands++;
  return send.apply(this, args);
};

const ran = (slotMs: number): void => void process.stdout.write(`ran ${slotMs} ${Date.now()}\n`);
const url = new URL(config.redisUrl);
const connection = { host: url.hostname, port: Number(url.port || 6379), db: Number(url.pathname.slice(1) || 0), maxRetriesPerRequest: null };

if (config.peer === 'bullmq') {
  const { Queue, Worker } = await import('bullmq');
  const queue = new Queue('cron', { connection, prefix: config.prefix });
  await queue.upsertJobScheduler('every-second', { pattern: '* * * * * *' }, { name: 'tick' });
  const worker = new Worker(
    'cron',
    (job) => {
      // A scheduler's job is `repeat:<scheduler>:<slot ms>`, and carries the slot as prevMillis.
      const fromId = Number(job.id?.split(':').at(-1));
      ran(Number.isFinite(fromId) ? fromId : Number((job.opts as { prevMillis?: number }).prevMillis));
      return Promise.resolve();
    },
    { connection, prefix: config.prefix, concurrency: 1 },
  );
  await worker.waitUntilReady();
} else {
  const cron = (await import('node-cron')).default;
  const redis = new Redis(connection);
  cron.schedule('* * * * * *', (ctx) => ran(ctx.date.getTime()), {
    name: 'every-second',
    distributed: true,
    runCoordinator: { shouldRun: async (key, ttlMs) => (await redis.set(`${config.prefix}:${key}`, '1', 'PX', ttlMs, 'NX')) === 'OK' },
  });
}
setInterval(() => void process.stdout.write(`requests ${commands}\n`), 200);
process.stdout.write('up\n');
