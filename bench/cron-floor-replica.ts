/**
 * One replica of the raw floor for per-slot cron's start (bench/cron-failover.ts, oneFloor): the
 * least a replica can do and still start each slot's job on one replica only. It sleeps to each
 * slot boundary by this host's clock, as startCron does, and claims the slot with one store call:
 * Redis `SET key NX PX`, SQLite and PostgreSQL `INSERT ... ON CONFLICT DO NOTHING` into a table
 * of the bench's. The replica whose call wrote starts its "job" as the answer arrives. No term, no
 * fencing token, no record of the outcome: what the per-slot engine adds to these is what the
 * figure's ratio shows. Prints "fire MS" as it sends each claim and "ran SLOT_MS START_MS" when its
 * job starts (this host's clock, fractional ms); "requests N" every 200 ms.
 */
import { createRequire } from 'node:module';

export interface FloorReplicaConfig {
  floor: 'redis' | 'sqlite' | 'postgres';
  /** Redis: the server's URL. SQLite: the database file. PostgreSQL: a connection string. */
  target: string;
  /** Redis: the key prefix. SQL: the table (created by the bench before any replica starts). */
  space: string;
  periodMs: number;
  ttlMs: number;
}

const config = JSON.parse(process.argv[2]!) as FloorReplicaConfig;
const nowMs = (): number => performance.timeOrigin + performance.now();
let requests = 0;

/** One claim of `slot`: true on the replica whose call wrote. */
let claim: (slot: number) => Promise<boolean>;
if (config.floor === 'redis') {
  const { Redis } = await import('ioredis');
  const redis = new Redis(config.target);
  await redis.ping();
  claim = async (slot) => (await redis.set(`${config.space}:${slot}`, '1', 'PX', config.ttlMs, 'NX')) === 'OK';
} else if (config.floor === 'sqlite') {
  const Database = createRequire(import.meta.url)('better-sqlite3') as new (file: string, o: { timeout: number }) => { prepare(sql: string): { run(...a: unknown[]): { changes: number } }; pragma(s: string): unknown };
  const db = new Database(config.target, { timeout: 5000 });
  db.pragma('journal_mode = WAL');
  const insert = db.prepare(`INSERT INTO ${config.space} (slot) VALUES (?) ON CONFLICT DO NOTHING`);
  claim = (slot) => Promise.resolve(insert.run(slot).changes === 1);
} else {
  const pg = (await import('pg')).default;
  const client = new pg.Client({ connectionString: config.target });
  await client.connect();
  claim = async (slot) => (await client.query(`INSERT INTO ${config.space} (slot) VALUES ($1) ON CONFLICT DO NOTHING`, [slot])).rowCount === 1;
}

/** Sleeps to the first slot boundary after `after` (a timer that fired a little early never fires one slot twice). */
function arm(after: number): void {
  const slot = Math.max(Math.ceil((Date.now() + 1) / config.periodMs) * config.periodMs, after + config.periodMs);
  setTimeout(() => {
    arm(slot);
    const fire = nowMs();
    process.stdout.write(`fire ${fire}\n`);
    requests++;
    claim(slot).then(
      (won) => {
        if (won) process.stdout.write(`ran ${slot} ${nowMs()}\n`);
      },
      (e: unknown) => process.stderr.write(`floor claim failed: ${String(e)}\n`),
    );
  }, slot - Date.now());
}
arm(0);
setInterval(() => void process.stdout.write(`requests ${requests}\n`), 200);
process.stdout.write('up\n');
