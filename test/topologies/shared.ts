/**
 * Shared by the topology tests: the PostgreSQL primary and standby of
 * scripts/services/pg-replicas.mjs (plain JavaScript, loaded by URL), and how long a run went
 * without a leader, from the terms each test records.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export interface PgReplicas {
  primaryUrl: string;
  standbyUrl: string;
  stopPrimary(): boolean;
  stopStandby(): boolean;
  startStandby(): void;
  promote(): void;
  syncState(): string;
  stop(): void;
}

/** LEASEHOLD_TEST_PG_REPLICA_PORT (default 24432): the primary; the standby on the next port. */
export const PG_REPLICA_PORT = Number(process.env['LEASEHOLD_TEST_PG_REPLICA_PORT'] ?? 24432);

/** The reason to skip a PostgreSQL replica test, or false. */
export function pgReplicaSkip(): string | false {
  const wanted = (process.env['LEASEHOLD_TEST_STORES'] ?? 'postgres').split(',').includes('postgres');
  if (!wanted) return 'postgres not selected';
  return existsSync('/usr/lib/postgresql') ? false : 'no PostgreSQL server binaries';
}

export async function startPgReplicas(options: { synchronous?: boolean; port?: number } = {}): Promise<PgReplicas> {
  const mjs = join(fileURLToPath(import.meta.url), '..', '..', '..', '..', 'scripts', 'services', 'pg-replicas.mjs');
  const mod = (await import(pathToFileURL(mjs).href)) as { startPgReplicas(o: { port: number; synchronous: boolean }): Promise<PgReplicas> };
  return mod.startPgReplicas({ port: options.port ?? PG_REPLICA_PORT, synchronous: options.synchronous ?? false });
}

/** Milliseconds between `from` and `to` (same clock as the terms) with no live term. */
export function leaderlessMs(terms: readonly { startedAt: number; endedAt?: number | undefined }[], from: number, to: number): number {
  let gap = 0;
  let cursor = from;
  for (const t of [...terms].sort((a, b) => a.startedAt - b.startedAt)) {
    const end = t.endedAt ?? Infinity;
    if (end <= cursor) continue;
    if (t.startedAt > cursor) gap += Math.min(t.startedAt, to) - cursor;
    cursor = Math.max(cursor, end);
    if (cursor >= to) break;
  }
  if (cursor < to) gap += to - cursor;
  return Math.max(0, Math.round(gap));
}

/**
 * A logger that keeps what the engine said, with times, for a failure's message (a slow handover,
 * a lost term): `said(from)` is every line from `from` on, ms after it, less what `skip` matches.
 */
export function recordingLogger(): {
  logger: { debug(o: object, m?: string): void; info(o: object, m?: string): void; warn(o: object, m?: string): void; error(o: object, m?: string): void };
  notes: { at: number; line: string }[];
  said(from: number, skip?: RegExp): string;
} {
  const notes: { at: number; line: string }[] = [];
  const note = (level: string) => (obj: object, msg?: string): void => {
    notes.push({ at: performance.now(), line: `${level} ${msg ?? ''} ${JSON.stringify(obj, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}` });
  };
  return {
    logger: { debug: note('debug'), info: note('info'), warn: note('warn'), error: note('error') },
    notes,
    said: (from, skip) =>
      notes
        .filter((x) => x.at >= from && (skip === undefined || !skip.test(x.line)))
        .map((x) => `${Math.round(x.at - from)}ms ${x.line}`)
        .join('\n'),
  };
}
