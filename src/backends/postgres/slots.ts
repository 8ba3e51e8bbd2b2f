/**
 * The slot ledger on PostgreSQL. Each call is one transaction on one pooled connection: the
 * lease row is read FOR SHARE (held by this holder, with this token, unexpired by now() of this
 * database), so a takeover's claim, which locks the row FOR UPDATE, waits for this transaction
 * and then issues a larger token; the slot row is read FOR UPDATE, and the rule in
 * src/scheduler/ledger.ts decides. A stale term's claim therefore never lands after a newer
 * term's, whatever the timing.
 */
import { AbortedError, ConfigError, StoreUnavailableError } from '../../core/errors.js';
import {
  decideSlotClaim,
  type SlotClaimRequest,
  type SlotClaimResult,
  type SlotCompletion,
  type SlotLedgerPort,
  type SlotPruneRequest,
  type SlotPruneResult,
  type SlotRecord,
  type SlotSkipRequest,
  type SlotStatus,
  type SlotTerm,
} from '../../scheduler/ledger.js';
import { decodeSchedule, encodeSchedule, type ScheduleRecord } from '../../scheduler/schedule-record.js';
import { validateSchemaName } from './schema.js';
import { createPool } from './driver.js';
import { mapPgError } from './errors.js';
import type { PgPoolLike, PgQueryableLike } from './store.js';
import { parsePostgresUrl } from './url.js';
import type { PgDriver } from './multi-host.js';

export interface PostgresSlotLedgerOptions {
  /** A pool on the lease store's database (the ledger's claims check the lease row). */
  pool: PgPoolLike;
  /** The lease store's schema. Default `leasehold`. */
  schema?: string;
}

/**
 * How long a ledger transaction may sit idle between its statements before PostgreSQL ends it.
 * Its statements run back to back with no user code between them, so an idle gap means the
 * process is frozen (SIGSTOP, a paused VM, a long GC) while it holds the lease row's share lock
 * and the slot row's lock: every takeover's claim would wait for as long as the freeze lasts.
 * Once the lease row is read, the bound drops to what is left of the term (past its expiry the
 * transaction may not land anyway), so a frozen holder never delays a takeover past its TTL.
 * Ending it rolls it back: the call has not landed, and its caller sees a store error.
 */
const IDLE_MS = 5000;

/** idle_in_transaction_session_timeout's FATAL (SQLSTATE 25P03). */
const IDLE_ENDED = '25P03';

const COLUMNS = `name, slot, (extract(epoch FROM slot_at) * 1000)::float8 AS slot_at_ms, status, token, holder,
  (extract(epoch FROM started_at) * 1000)::float8 AS started_ms, (extract(epoch FROM ended_at) * 1000)::float8 AS ended_ms, exit_code, reason`;

export class PostgresSlotLedger implements SlotLedgerPort {
  readonly kind = 'postgres';
  private readonly pool: PgPoolLike;
  private readonly schema: string;
  private readonly s: string;
  private readonly end: (() => Promise<void>) | undefined;

  constructor(options: PostgresSlotLedgerOptions, end?: () => Promise<void>) {
    this.pool = options.pool;
    this.schema = validateSchemaName(options.schema ?? 'leasehold');
    this.s = `"${this.schema}"`;
    this.end = end;
  }

  /** A ledger with a small pool of its own, for the store at `url` (what the CLI uses). */
  static async fromUrl(url: string, schema?: string): Promise<PostgresSlotLedger> {
    const parsed = parsePostgresUrl(url);
    let pg: PgDriver;
    try {
      const mod = (await import('pg')) as unknown as { default?: typeof pg } & typeof pg;
      pg = mod.default ?? mod;
    } catch (err) {
      throw new ConfigError('the PostgreSQL slot ledger needs the "pg" package: npm install pg', { cause: err });
    }
    const s = schema ?? parsed.schema ?? 'leasehold';
    // Several hosts: tried in order, as the lease store's own pool does (./multi-host.ts).
    const pool = createPool(pg, parsed.target, { max: 2, connectionTimeoutMillis: 5000, query_timeout: 10_000, allowExitOnIdle: true }, s);
    return new PostgresSlotLedger({ pool, schema: s }, () => pool.end?.() ?? Promise.resolve());
  }

  private async tx<T>(fn: (db: PgQueryableLike, nowMs: number, held: (t: SlotTerm) => Promise<boolean>) => Promise<T>, signal?: AbortSignal): Promise<T> {
    // A function, not a field read: TypeScript would keep the narrowing of the first check.
    const aborted = (): boolean => signal?.aborted === true;
    if (aborted()) throw new AbortedError('slot ledger call aborted before it started');
    let client;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw mapPgError(err, this.schema);
    }
    let cancel: (() => void) | undefined;
    // The server may end this session itself (the idle bound, after a freeze): without a listener
    // of ours, that 'error' event on a checked-out client would be unhandled and crash the process.
    let broken: Error | undefined;
    const onError = (err?: Error): void => {
      broken ??= err ?? new Error('the connection ended');
    };
    client.on('error', onError);
    try {
      if (signal !== undefined) {
        // An abort cancels the statement in progress (a lock wait included) from another
        // connection: the transaction then rolls back, so the call has not landed.
        const pid = Number((await client.query(`SELECT pg_backend_pid() AS pid`)).rows[0]!['pid']);
        cancel = () => void this.pool.query(`SELECT pg_cancel_backend($1)`, [pid]).catch(() => {});
        signal.addEventListener('abort', cancel, { once: true });
      }
      await client.query(`BEGIN; SET LOCAL idle_in_transaction_session_timeout = ${IDLE_MS}`);
      const now = Number((await client.query(`SELECT (extract(epoch FROM now()) * 1000)::float8 AS now`)).rows[0]!['now']);
      const held = async (t: SlotTerm): Promise<boolean> =>
        (
          await client.query(
            `SELECT set_config('idle_in_transaction_session_timeout',
                 least(${IDLE_MS}, greatest(1, ceil(extract(epoch FROM expires_at - now()) * 1000)))::bigint::text, true)
               FROM ${this.s}.leases WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > now() FOR SHARE`,
            [
            t.name,
            t.holder,
            t.token.toString(),
          ])
        ).rows.length === 1;
      const result = await fn(client, now, held);
      if (aborted()) throw new AbortedError('slot ledger call aborted; rolled back');
      await client.query('COMMIT');
      return result;
    } catch (err) {
      if (broken === undefined) await client.query('ROLLBACK').catch(() => {});
      if (aborted()) throw new AbortedError('slot ledger call aborted; rolled back', { cause: err });
      const why = broken ?? err;
      if ((why as { code?: unknown }).code === IDLE_ENDED) {
        throw new StoreUnavailableError(
          `PostgreSQL ended a slot ledger transaction that sat idle past its bound (this process was frozen or starved mid-call); it was rolled back and has not landed`,
          { cause: why },
        );
      }
      throw mapPgError(why, this.schema);
    } finally {
      if (cancel !== undefined) signal?.removeEventListener('abort', cancel);
      (client as unknown as { off?(e: 'error', l: (err?: Error) => void): unknown }).off?.('error', onError);
      // A session the server ended goes back to the pool as broken, to be discarded.
      client.release(broken ?? undefined);
    }
  }

  claim(req: SlotClaimRequest): Promise<SlotClaimResult> {
    return this.tx(async (db, now, held) => {
      const isHeld = await held(req);
      const cur = (await db.query(`SELECT ${COLUMNS} FROM ${this.s}.slots WHERE name = $1 AND slot = $2 FOR UPDATE`, [req.name, req.key])).rows[0];
      const row = cur === undefined ? undefined : toRecord(cur);
      const d = decideSlotClaim(row, req, isHeld, now);
      const w = d.write;
      if (w.kind !== 'none') {
        const ended = w.status === 'skipped';
        await db.query(
          `INSERT INTO ${this.s}.slots (name, slot, slot_at, status, token, holder, started_at, ended_at, exit_code, reason)
           VALUES ($1, $2, to_timestamp($3::float8 / 1000), $4, $5, $6, now(), CASE WHEN $7 THEN now() END, NULL, $8)
           ON CONFLICT (name, slot) DO UPDATE SET status = EXCLUDED.status, token = EXCLUDED.token, holder = EXCLUDED.holder,
             started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at, exit_code = NULL, reason = EXCLUDED.reason`,
          [req.name, req.key, req.slotAtMs, w.status, req.token.toString(), req.holder, ended, w.reason],
        );
      }
      if (d.outcome === 'done') {
        const after = (await db.query(`SELECT ${COLUMNS} FROM ${this.s}.slots WHERE name = $1 AND slot = $2`, [req.name, req.key])).rows[0]!;
        return { outcome: 'done', storeNowMs: now, record: toRecord(after) };
      }
      if (d.outcome === 'claimed') return { outcome: 'claimed', storeNowMs: now, rerunOf: d.rerunOf };
      return { outcome: d.outcome, storeNowMs: now };
    }, req.signal);
  }

  skip(req: SlotSkipRequest): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }> {
    return this.tx(async (db, now, held) => {
      if (!(await held(req))) return { fenced: true, skipped: 0, storeNowMs: now };
      const r = await db.query(
        `INSERT INTO ${this.s}.slots (name, slot, slot_at, status, token, holder, started_at, ended_at, reason)
         SELECT $1, k, to_timestamp(t / 1000), 'skipped', $4, $5, now(), now(), $6 FROM unnest($2::text[], $3::float8[]) AS u(k, t)
         ON CONFLICT (name, slot) DO NOTHING`,
        [req.name, req.slots.map((x) => x.key), req.slots.map((x) => x.slotAtMs), req.token.toString(), req.holder, req.reason],
      );
      return { fenced: false, skipped: r.rowCount ?? 0, storeNowMs: now };
    });
  }

  complete(req: SlotCompletion): Promise<{ completed: boolean; storeNowMs: number }> {
    return this.tx(async (db, now) => {
      const r = await db.query(
        `UPDATE ${this.s}.slots SET status = $4, ended_at = now(), exit_code = $5, reason = coalesce($6, reason)
          WHERE name = $1 AND slot = $2 AND token = $3 AND status = 'claimed'`,
        [req.name, req.key, req.token.toString(), req.status, req.exitCode, req.reason],
      );
      return { completed: r.rowCount === 1, storeNowMs: now };
    });
  }

  interruptStale(term: SlotTerm): Promise<{ fenced: boolean; interrupted: number; storeNowMs: number }> {
    return this.tx(async (db, now, held) => {
      if (!(await held(term))) return { fenced: true, interrupted: 0, storeNowMs: now };
      const r = await db.query(
        `UPDATE ${this.s}.slots SET status = 'interrupted', ended_at = now(), reason = 'its term ended before it completed (seen by term ' || $2 || ')'
          WHERE name = $1 AND status = 'claimed' AND token < $2`,
        [term.name, term.token.toString()],
      );
      return { fenced: false, interrupted: r.rowCount ?? 0, storeNowMs: now };
    });
  }

  async records(name: string, options: { sinceMs?: number; untilMs?: number; limit?: number } = {}): Promise<SlotRecord[]> {
    const since = options.sinceMs;
    const r = await this.pool
      .query(
        `SELECT * FROM (SELECT ${COLUMNS} FROM ${this.s}.slots WHERE name = $1 AND ($2::float8 IS NULL OR slot_at > to_timestamp($2::float8 / 1000))
            AND ($4::float8 IS NULL OR slot_at <= to_timestamp($4::float8 / 1000))
          ORDER BY coalesce(slot_at, started_at) DESC, slot DESC LIMIT $3) x ORDER BY coalesce(slot_at_ms, started_ms), slot`,
        [name, since ?? null, options.limit ?? 1000, options.untilMs ?? null],
      )
      .catch((err: unknown) => {
        throw mapPgError(err, this.schema);
      });
    return r.rows.map(toRecord);
  }

  /**
   * One statement, autocommitted: it locks only the rows it deletes (old, final rows no term
   * reads), never the lease row, so a running schedule's claims do not wait on it beyond the
   * batch. The cutoff is the rule of slotPruneCutoff (ledger.ts) in SQL: the `keep`-th newest
   * slot time and the newest one before the horizon, both read through (name, slot_at).
   */
  async prune(req: SlotPruneRequest): Promise<SlotPruneResult> {
    const r = await this.pool
      .query(
        `WITH c AS (
           SELECT CASE WHEN k IS NULL OR b IS NULL THEN NULL ELSE least(k, b) END AS cutoff FROM (SELECT
             (SELECT slot_at FROM ${this.s}.slots WHERE name = $1 AND slot_at IS NOT NULL ORDER BY slot_at DESC OFFSET $3 LIMIT 1) AS k,
             (SELECT max(slot_at) FROM ${this.s}.slots WHERE name = $1 AND slot_at < now() - $2::float8 * interval '1 millisecond') AS b) x),
         v AS (
           (SELECT ctid AS t FROM ${this.s}.slots WHERE name = $1 AND slot_at < (SELECT cutoff FROM c) AND status <> 'claimed' ORDER BY slot_at LIMIT $5)
           UNION ALL
           (SELECT ctid FROM ${this.s}.slots WHERE $4::float8 IS NOT NULL AND name = $1 AND slot_at IS NULL AND status <> 'claimed'
              AND ended_at < now() - $4::float8 * interval '1 millisecond' LIMIT $5)),
         -- By ctid (a TID scan, not a join over the name's rows); a row changed since the read has a
         -- new ctid and is left alone, and the status is checked again on the row deleted.
         d AS (DELETE FROM ${this.s}.slots WHERE ctid = ANY (ARRAY(SELECT t FROM v LIMIT $5)) AND name = $1 AND status <> 'claimed' RETURNING 1)
         SELECT (SELECT count(*) FROM d)::int AS n, (extract(epoch FROM now()) * 1000)::float8 AS now`,
        [req.name, req.olderThanMs, Math.max(1, req.keep) - 1, req.oncePerOlderThanMs ?? null, req.limit],
      )
      .catch((err: unknown) => {
        throw mapPgError(err, this.schema);
      });
    const deleted = Number(r.rows[0]!['n']);
    return { deleted, more: deleted >= req.limit, storeNowMs: Number(r.rows[0]!['now']) };
  }

  async names(): Promise<string[]> {
    const r = await this.pool.query(`SELECT DISTINCT name FROM ${this.s}.slots ORDER BY name`).catch((err: unknown) => {
      throw mapPgError(err, this.schema);
    });
    return r.rows.map((x) => x['name'] as string);
  }

  async putSchedule(record: ScheduleRecord): Promise<void> {
    await this.pool
      .query(
        `INSERT INTO ${this.s}.schedules (name, token, record) VALUES ($1, $2, $3)
         ON CONFLICT (name) DO UPDATE SET token = excluded.token, record = excluded.record, updated_at = now() WHERE schedules.token <= excluded.token`,
        [record.name, record.token.toString(), encodeSchedule(record)],
      )
      .catch((err: unknown) => {
        throw mapPgError(err, this.schema);
      });
  }

  async schedules(): Promise<ScheduleRecord[]> {
    const r = await this.pool.query(`SELECT record FROM ${this.s}.schedules ORDER BY name`).catch((err: unknown) => {
      throw mapPgError(err, this.schema);
    });
    return r.rows.map((x) => decodeSchedule(x['record'] as string));
  }

  async close(): Promise<void> {
    await this.end?.();
  }
}

function num(v: unknown): number | null {
  return v === null || v === undefined ? null : Number(v);
}

function toRecord(row: Record<string, unknown>): SlotRecord {
  return {
    name: row['name'] as string,
    key: row['slot'] as string,
    slotAtMs: num(row['slot_at_ms']),
    status: row['status'] as SlotStatus,
    token: BigInt(row['token'] as string),
    holder: (row['holder'] as string | null) ?? null,
    startedAtMs: num(row['started_ms']),
    endedAtMs: num(row['ended_ms']),
    exitCode: num(row['exit_code']),
    reason: (row['reason'] as string | null) ?? null,
  };
}
