/**
 * What a demo worker tells the demo, one JSON object per line on its stdout. Tokens travel as
 * decimal strings: JSON has no bigint, and a token must never pass through a float.
 */
export type Report =
  | { type: 'ready'; worker: string; pid: number; holder: string; at: number }
  | { type: 'identity'; worker: string; holder: string; at: number }
  | { type: 'acquired'; worker: string; token: string; holder: string; at: number }
  | { type: 'lost'; worker: string; token: string; reason: string; at: number }
  | { type: 'released'; worker: string; token: string; handedOver: boolean; at: number }
  /** A unit of work began: the worker read `token` and will write with it, whatever happens meanwhile. */
  | { type: 'unit'; worker: string; token: string; seq: number; at: number }
  | { type: 'accepted'; worker: string; token: string; seq: number; id: number; at: number }
  /** `leaseKnewLost`: the worker's own Lease had already ended this term when the write was tried. */
  | { type: 'fenced'; worker: string; token: string; seq: number; highWater: string | null; leaseKnewLost: boolean; at: number }
  | { type: 'write-error'; worker: string; token: string; seq: number; message: string; at: number }
  | { type: 'stopped'; worker: string; at: number }
  | { type: 'error'; worker: string; message: string; at: number };

export type ReportOf<K extends Report['type']> = Extract<Report, { type: K }>;

const TYPES = new Set<string>(['ready', 'identity', 'acquired', 'lost', 'released', 'unit', 'accepted', 'fenced', 'write-error', 'stopped', 'error']);

/** One line of a worker's stdout, or undefined when it is not a report (stray output is ignored). */
export function parseReport(line: string): Report | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    const value = JSON.parse(line) as { type?: unknown; worker?: unknown };
    if (typeof value.type !== 'string' || !TYPES.has(value.type) || typeof value.worker !== 'string') return undefined;
    return value as Report;
  } catch {
    return undefined;
  }
}

/** The table the workers write their units of work into; the fence guards it. */
export const DEMO_TABLE = 'leasehold_demo_writes';

export const DEMO_TABLE_DDL = `CREATE TABLE IF NOT EXISTS ${DEMO_TABLE} (
  id     INTEGER PRIMARY KEY AUTOINCREMENT,
  run    TEXT    NOT NULL,
  worker TEXT    NOT NULL,
  token  INTEGER NOT NULL,
  seq    INTEGER NOT NULL,
  at     INTEGER NOT NULL
)`;

/** One accepted write, as the demo table holds it. `id` is commit order. */
export interface WriteRow {
  id: number;
  worker: string;
  token: bigint;
  seq: number;
  at: number;
}
