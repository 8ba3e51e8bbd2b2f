/**
 * The soak: N leases held through the engine (acquired, renewed by its scheduler, released on
 * close) on one store for a duration, sampled at regular intervals (each minute; six times when
 * the soak is shorter than six minutes): this process's RSS, heap used and CPU, and the store's
 * CPU, then their slopes per minute (least squares). A leak shows as a slope that stays above
 * zero however long the soak runs; a flat line is the figure a user can plan on.
 *
 * The store's CPU: PostgreSQL, the serving backends of this process's connections (found by
 * their application_name in pg_stat_activity, read from /proc/<pid>/stat: the server must be on
 * this host); Redis, INFO cpu (the whole server: other clients of a shared Redis count too);
 * etcd, its process's /proc/<pid>/stat (the etcd on this host whose command line names the
 * URL's port); SQLite, none of its own (the store runs in this process, in the client's CPU).
 *
 *   npm run bench -- --soak 10m [--soak-leases 10000] [--stores postgres]
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import pg from 'pg';
import { Redis } from 'ioredis';
import { Leasehold } from '../src/core/leasehold.js';
import { openStore } from '../src/backends/index.js';
import { makeTestStore, TEST_PG_URL, type StoreKind } from '../test/helpers/stores.js';
import { TEST_REDIS_URL } from '../test/helpers/redis-store.js';
import { TEST_ETCD_URL } from '../test/helpers/etcd-store.js';
import { sleep } from './lib.js';

/** Lease TTL in the soak: the engine renews each lease every TTL / 3, batched per tick. */
const SOAK_TTL_MS = 30_000;
/** Leases acquired at once while the soak sets up (the engine batches their claims). */
const ACQUIRE_AT_ONCE = 500;

export interface SoakSample {
  atMin: number;
  rssMb: number;
  heapMb: number;
  /** CPU seconds per minute of wall time over the interval that ended at this sample. */
  clientCpu: number;
  storeCpu: number | null;
}

export interface SoakResult {
  store: StoreKind;
  leases: number;
  minutes: number;
  samples: SoakSample[];
  /** Per minute: MB/min for memory, (CPU s/min)/min for CPU. */
  slopes: { rssMb: number; heapMb: number; clientCpu: number; storeCpu: number | null };
}

/** Least-squares slope of y against x; 0 for fewer than two points. */
export function slope(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  if (n < 2) return 0;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += (xs[i]! - mx) * (ys[i]! - my);
    den += (xs[i]! - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

/** `10m`, `30s`, `1h`, or bare seconds. */
export function parseSoakDuration(s: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(s.trim());
  if (m === null) return undefined;
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 's') as 'ms' | 's' | 'm' | 'h'];
  const ms = Number(m[1]) * unit;
  return ms > 0 ? ms : undefined;
}

/** utime + stime of a process, in seconds (the kernel's clock ticks: 100 a second on Linux). */
function procCpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** The store's own CPU seconds so far, or null where it has none apart from this process. */
type StoreCpu = { read(): Promise<number | null>; close(): Promise<void> };

async function storeCpu(kind: StoreKind, applicationName: string): Promise<StoreCpu> {
  switch (kind) {
    case 'postgres': {
      const c = new pg.Client({ connectionString: TEST_PG_URL });
      await c.connect();
      // Backends end and are replaced (a pool's idle timeout): their CPU is summed as last seen.
      const last = new Map<number, number>();
      return {
        async read() {
          const r = await c.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [applicationName]);
          for (const { pid } of r.rows) {
            try {
              last.set(pid, procCpuSeconds(pid));
            } catch {
              // Ended between the query and the read, or on another host: kept as last seen.
            }
          }
          return [...last.values()].reduce((a, b) => a + b, 0);
        },
        close: () => c.end(),
      };
    }
    case 'redis': {
      const r = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
      return {
        async read() {
          const info = await r.info('cpu');
          const get = (k: string): number => Number(new RegExp(`^${k}:([\\d.]+)`, 'm').exec(info)?.[1] ?? Number.NaN);
          return get('used_cpu_sys') + get('used_cpu_user');
        },
        close: async () => void r.disconnect(),
      };
    }
    case 'etcd': {
      const port = /:(\d+)/.exec(TEST_ETCD_URL.replace(/^etcds?:\/\//, ''))?.[1] ?? '2379';
      const pid = readdirSync('/proc')
        .filter((d) => /^\d+$/.test(d))
        .find((d) => {
          try {
            const cmd = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
            return cmd[0]?.endsWith('etcd') === true && cmd.some((a) => a.includes(`:${port}`));
          } catch {
            return false;
          }
        });
      return { read: () => Promise.resolve(pid === undefined ? null : procCpuSeconds(Number(pid))), close: () => Promise.resolve() };
    }
    default:
      return { read: () => Promise.resolve(null), close: () => Promise.resolve() };
  }
}

const fmt = (n: number | null, digits = 2): string => (n === null || !Number.isFinite(n) ? 'n/a' : n.toFixed(digits));

export async function soak(kind: StoreKind, leases: number, durationMs: number): Promise<SoakResult> {
  const t = await makeTestStore(kind);
  const appName = `lh-soak-${randomBytes(4).toString('hex')}`;
  // PostgreSQL: the store's own connections carry a name of their own, so its backends can be found.
  const url = kind === 'postgres' ? `${t.url}${t.url.includes('?') ? '&' : '?'}application_name=${appName}` : t.url;
  const store = kind === 'postgres' ? await openStore(url) : t.store;
  const lh = new Leasehold({ store });
  const cpu = await storeCpu(kind, appName);
  const samples: SoakSample[] = [];
  try {
    const prefix = `soak-${randomBytes(3).toString('hex')}`;
    const names = Array.from({ length: leases }, (_, i) => `${prefix}-${i}`);
    for (let i = 0; i < names.length; i += ACQUIRE_AT_ONCE) {
      await Promise.all(names.slice(i, i + ACQUIRE_AT_ONCE).map((n) => lh.lease(n, { ttl: SOAK_TTL_MS }).acquire({ wait: '60s' })));
    }
    process.stdout.write(`  ${kind}: ${leases} leases held (ttl ${SOAK_TTL_MS / 1000}s), soaking for ${(durationMs / 60_000).toFixed(1)} min\n`);
    process.stdout.write('  min    rss MB   heap MB   client cpu s/min   store cpu s/min\n');
    const intervalMs = Math.min(60_000, durationMs / 6);
    const t0 = performance.now();
    let lastCpu = process.cpuUsage();
    let lastStore = await cpu.read();
    let lastAt = t0;
    for (let k = 1; k * intervalMs <= durationMs + 1; k++) {
      await sleep(t0 + k * intervalMs - performance.now());
      const now = performance.now();
      const perMin = 60_000 / (now - lastAt);
      const used = process.cpuUsage(lastCpu);
      const storeNow = await cpu.read();
      const mem = process.memoryUsage();
      const s: SoakSample = {
        atMin: (now - t0) / 60_000,
        rssMb: mem.rss / 2 ** 20,
        heapMb: mem.heapUsed / 2 ** 20,
        clientCpu: ((used.user + used.system) / 1e6) * perMin,
        storeCpu: storeNow === null || lastStore === null ? null : (storeNow - lastStore) * perMin,
      };
      samples.push(s);
      process.stdout.write(
        `  ${s.atMin.toFixed(1).padStart(4)}  ${s.rssMb.toFixed(1).padStart(8)}  ${s.heapMb.toFixed(1).padStart(8)}  ${fmt(s.clientCpu, 3).padStart(17)}  ${fmt(s.storeCpu, 3).padStart(16)}\n`,
      );
      lastCpu = process.cpuUsage();
      lastStore = storeNow;
      lastAt = now;
    }
    const at = samples.map((s) => s.atMin);
    const storeSeries = samples.every((s) => s.storeCpu !== null) ? samples.map((s) => s.storeCpu!) : null;
    const slopes = {
      rssMb: slope(at, samples.map((s) => s.rssMb)),
      heapMb: slope(at, samples.map((s) => s.heapMb)),
      clientCpu: slope(at, samples.map((s) => s.clientCpu)),
      storeCpu: storeSeries === null ? null : slope(at, storeSeries),
    };
    process.stdout.write(
      `  slopes per minute: rss ${fmt(slopes.rssMb, 3)} MB, heap ${fmt(slopes.heapMb, 3)} MB, client cpu ${fmt(slopes.clientCpu, 4)} s/min, store cpu ${fmt(slopes.storeCpu, 4)} s/min` +
        `${kind === 'sqlite' ? ' (SQLite runs in this process: its CPU is the client\'s)' : kind === 'redis' ? ' (Redis: the whole server\'s CPU)' : ''}\n`,
    );
    return { store: kind, leases, minutes: durationMs / 60_000, samples, slopes };
  } finally {
    await lh.close();
    if (store !== t.store) await store.close();
    await cpu.close();
    await t.cleanup();
  }
}
