/**
 * The slot ledger on SQLite: each call is one BEGIN IMMEDIATE transaction on the lease store's
 * own connection, so the lease row check (holder, token, unexpired by this host's clock, which
 * is the SQLite store's clock) and the slot write happen under one write lock, and the rule in
 * src/scheduler/ledger.ts decides. Synchronous like fencedWriteSync: a call can block the event
 * loop for up to the connection's busy timeout while another process holds the write lock.
 */
import { AbortedError, ConfigError } from '../../core/errors.js';
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
import { mapSqliteError } from './errors.js';
import { immediate, type SqliteDatabaseLike } from './store.js';

const SLOTS = 'leasehold_slots';
const SCHEDULES = 'leasehold_schedules';
const LEASES = 'leasehold_leases';

interface Row {
  name: string;
  slot: string;
  slot_at: bigint | null;
  status: SlotStatus;
  token: bigint;
  holder: string | null;
  started_at: bigint | null;
  ended_at: bigint | null;
  exit_code: bigint | null;
  reason: string | null;
}

export class SqliteSlotLedger implements SlotLedgerPort {
  readonly kind = 'sqlite';
  private readonly db: SqliteDatabaseLike;

  /** `database`: the lease store's (`sqliteStore.database`), so claims see the lease rows. */
  constructor(database: SqliteDatabaseLike) {
    if (database === undefined || typeof database.prepare !== 'function') throw new ConfigError('SqliteSlotLedger needs the SQLite store\'s database (store.database)');
    this.db = database;
  }

  private tx<T>(fn: (now: number) => T): Promise<T> {
    try {
      return Promise.resolve(immediate(this.db, () => fn(Date.now())));
    } catch (err) {
      return Promise.reject(mapSqliteError(err));
    }
  }

  private held(t: SlotTerm, now: number): boolean {
    return (
      this.db.prepare(`SELECT 1 FROM ${LEASES} WHERE name = ? AND holder = ? AND token = ? AND expires_at > ?`).get(t.name, t.holder, t.token, now) !== undefined
    );
  }

  private row(name: string, key: string): SlotRecord | undefined {
    const r = this.db.prepare(`SELECT * FROM ${SLOTS} WHERE name = ? AND slot = ?`).safeIntegers(true).get(name, key) as Row | undefined;
    return r === undefined ? undefined : toRecord(r);
  }

  claim(req: SlotClaimRequest): Promise<SlotClaimResult> {
    if (req.signal?.aborted === true) return Promise.reject(new AbortedError('slot ledger call aborted before it started'));
    return this.tx((now) => {
      const d = decideSlotClaim(this.row(req.name, req.key), req, this.held(req, now), now);
      const w = d.write;
      if (w.kind !== 'none') {
        this.db
          .prepare(
            `INSERT INTO ${SLOTS} (name, slot, slot_at, status, token, holder, started_at, ended_at, exit_code, reason)
             VALUES (@name, @key, @slotAt, @status, @token, @holder, @now, @ended, NULL, @reason)
             ON CONFLICT (name, slot) DO UPDATE SET status = excluded.status, token = excluded.token, holder = excluded.holder,
               started_at = excluded.started_at, ended_at = excluded.ended_at, exit_code = NULL, reason = excluded.reason`,
          )
          .run({ name: req.name, key: req.key, slotAt: req.slotAtMs, status: w.status, token: req.token, holder: req.holder, now, ended: w.status === 'skipped' ? now : null, reason: w.reason });
      }
      if (d.outcome === 'done') return { outcome: 'done', storeNowMs: now, record: this.row(req.name, req.key)! };
      if (d.outcome === 'claimed') return { outcome: 'claimed', storeNowMs: now, rerunOf: d.rerunOf };
      return { outcome: d.outcome, storeNowMs: now };
    });
  }

  skip(req: SlotSkipRequest): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }> {
    return this.tx((now) => {
      if (!this.held(req, now)) return { fenced: true, skipped: 0, storeNowMs: now };
      const ins = this.db.prepare(
        `INSERT INTO ${SLOTS} (name, slot, slot_at, status, token, holder, started_at, ended_at, reason) VALUES (?, ?, ?, 'skipped', ?, ?, ?, ?, ?)
         ON CONFLICT (name, slot) DO NOTHING`,
      );
      let skipped = 0;
      for (const s of req.slots) skipped += ins.run(req.name, s.key, s.slotAtMs, req.token, req.holder, now, now, req.reason).changes;
      return { fenced: false, skipped, storeNowMs: now };
    });
  }

  complete(req: SlotCompletion): Promise<{ completed: boolean; storeNowMs: number }> {
    return this.tx((now) => {
      const r = this.db
        .prepare(`UPDATE ${SLOTS} SET status = ?, ended_at = ?, exit_code = ?, reason = coalesce(?, reason) WHERE name = ? AND slot = ? AND token = ? AND status = 'claimed'`)
        .run(req.status, now, req.exitCode, req.reason, req.name, req.key, req.token);
      return { completed: r.changes === 1, storeNowMs: now };
    });
  }

  interruptStale(term: SlotTerm): Promise<{ fenced: boolean; interrupted: number; storeNowMs: number }> {
    return this.tx((now) => {
      if (!this.held(term, now)) return { fenced: true, interrupted: 0, storeNowMs: now };
      const r = this.db
        .prepare(`UPDATE ${SLOTS} SET status = 'interrupted', ended_at = ?, reason = ? WHERE name = ? AND status = 'claimed' AND token < ?`)
        .run(now, `its term ended before it completed (seen by term ${term.token})`, term.name, term.token);
      return { fenced: false, interrupted: r.changes, storeNowMs: now };
    });
  }

  records(name: string, options: { sinceMs?: number; untilMs?: number; limit?: number } = {}): Promise<SlotRecord[]> {
    try {
      const rows = this.db
        .prepare(
          `SELECT * FROM (SELECT * FROM ${SLOTS} WHERE name = ? AND (? IS NULL OR slot_at > ?) AND (? IS NULL OR slot_at <= ?) ORDER BY coalesce(slot_at, started_at) DESC, slot DESC LIMIT ?)
            ORDER BY coalesce(slot_at, started_at), slot`,
        )
        .safeIntegers(true)
        .all(name, options.sinceMs ?? null, options.sinceMs ?? null, options.untilMs ?? null, options.untilMs ?? null, options.limit ?? 1000) as Row[];
      return Promise.resolve(rows.map(toRecord));
    } catch (err) {
      return Promise.reject(mapSqliteError(err));
    }
  }

  /**
   * One BEGIN IMMEDIATE transaction per batch: it holds the write lock for the batch alone, and a
   * schedule's claims (on this connection or another process's) go between batches. The cutoff
   * is slotPruneCutoff's rule (ledger.ts), read through (name, slot_at).
   */
  prune(req: SlotPruneRequest): Promise<SlotPruneResult> {
    return this.tx((now) => {
      const cutoff = this.db
        .prepare(
          `SELECT min(
             (SELECT slot_at FROM ${SLOTS} WHERE name = @name AND slot_at IS NOT NULL ORDER BY slot_at DESC LIMIT 1 OFFSET @offset),
             (SELECT max(slot_at) FROM ${SLOTS} WHERE name = @name AND slot_at < @horizon)) AS cutoff`,
        )
        .get({ name: req.name, offset: Math.max(1, req.keep) - 1, horizon: now - req.olderThanMs }) as { cutoff: number | null };
      let deleted = 0;
      if (cutoff.cutoff !== null) {
        deleted += this.db
          .prepare(
            `DELETE FROM ${SLOTS} WHERE name = @name AND slot IN
               (SELECT slot FROM ${SLOTS} WHERE name = @name AND slot_at < @cutoff AND status <> 'claimed' ORDER BY slot_at LIMIT @limit)`,
          )
          .run({ name: req.name, cutoff: cutoff.cutoff, limit: req.limit }).changes;
      }
      if (req.oncePerOlderThanMs !== undefined && deleted < req.limit) {
        deleted += this.db
          .prepare(
            `DELETE FROM ${SLOTS} WHERE name = @name AND slot IN
               (SELECT slot FROM ${SLOTS} WHERE name = @name AND slot_at IS NULL AND status <> 'claimed' AND ended_at < @horizon LIMIT @limit)`,
          )
          .run({ name: req.name, horizon: now - req.oncePerOlderThanMs, limit: req.limit - deleted }).changes;
      }
      return { deleted, more: deleted >= req.limit, storeNowMs: now };
    });
  }

  names(): Promise<string[]> {
    try {
      return Promise.resolve((this.db.prepare(`SELECT DISTINCT name FROM ${SLOTS} ORDER BY name`).all() as { name: string }[]).map((r) => r.name));
    } catch (err) {
      return Promise.reject(mapSqliteError(err));
    }
  }

  putSchedule(record: ScheduleRecord): Promise<void> {
    return this.tx((now) => {
      this.db
        .prepare(
          `INSERT INTO ${SCHEDULES} (name, token, record, updated_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (name) DO UPDATE SET token = excluded.token, record = excluded.record, updated_at = excluded.updated_at WHERE ${SCHEDULES}.token <= excluded.token`,
        )
        .run(record.name, record.token, encodeSchedule(record), now);
    });
  }

  schedules(): Promise<ScheduleRecord[]> {
    try {
      return Promise.resolve((this.db.prepare(`SELECT record FROM ${SCHEDULES} ORDER BY name`).all() as { record: string }[]).map((r) => decodeSchedule(r.record)));
    } catch (err) {
      return Promise.reject(mapSqliteError(err));
    }
  }

  /** The connection is the store's: closing the store closes it. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}

function n(v: bigint | null): number | null {
  return v === null ? null : Number(v);
}

function toRecord(r: Row): SlotRecord {
  return {
    name: r.name,
    key: r.slot,
    slotAtMs: n(r.slot_at),
    status: r.status,
    token: BigInt(r.token),
    holder: r.holder,
    startedAtMs: n(r.started_at),
    endedAtMs: n(r.ended_at),
    exitCode: n(r.exit_code),
    reason: r.reason,
  };
}
