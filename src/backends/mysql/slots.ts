/**
 * The slot ledger on MySQL / MariaDB, on the lease store's own connections.
 *
 * PostgreSQL's ledger reads the lease row FOR SHARE and then decides in the client, holding the
 * lock across round trips; a cron leader frozen there held every takeover up until the server
 * ended its transaction. Here no lock outlives one server-side batch:
 *
 *  1. a plain read, no locks: is the lease held by this term by the server's clock, what is the
 *     slot's row, what time is it. The rule in src/scheduler/ledger.ts decides; an answer that
 *     writes nothing is that read's (one statement, one snapshot).
 *  2. a write, if the rule makes one: one batch that locks the lease row in share mode (a
 *     takeover's claim locks it for update, so it waits for this batch and then issues a larger
 *     token), checks the term again by the clock read after that lock, and writes the slot row
 *     only if it is still what step 1 read (an UPDATE whose WHERE is the row read; an INSERT of
 *     a row that was absent). If anything changed in between, the call starts again at 1.
 *
 * A batch that fails part-way (a lock-wait timeout) leaves its transaction open until the client
 * rolls it back; MariaDB's idle_transaction_timeout on the store's sessions (5s) bounds that for
 * a process frozen at that moment. MySQL 8 has no such bound. A skip too large for one packet is
 * one batch sent in several round trips (nothing decided in the client between them), so its
 * share lock lasts those round trips, under the same bound.
 */
import { StoreUnavailableError } from '../../core/errors.js';
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
import { runBatch } from './batch.js';
import { splitByPacket } from './packet.js';
import { NOW_US, T } from './schema.js';
import type { MysqlStore } from './store.js';

const SLOTS = 'leasehold_slots';
const COLUMNS = 's.name, s.slot, s.slot_at_us, s.status, s.token, s.holder, s.started_at_us, s.ended_at_us, s.exit_code, s.reason';
const KEY_COL = 'VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin';

/** A claim whose row keeps changing under it this many times in a row gives up (retryable). */
const MAX_ATTEMPTS = 8;

interface Row {
  name: string | null;
  slot: string | null;
  slot_at_us: string | null;
  status: SlotStatus | null;
  token: string | null;
  holder: string | null;
  started_at_us: string | null;
  ended_at_us: string | null;
  exit_code: number | null;
  reason: string | null;
}

/**
 * The start of a write batch: the lease row locked in share mode, then the term checked by the
 * clock read after the lock (a wait for it must not make a lapsed term look live). Its values:
 * name, holder, token.
 */
const LOCK_TERM = [
  'SET @ls_e = NULL, @ls_n = 0',
  'START TRANSACTION',
  `SELECT expires_at_us INTO @ls_e FROM ${T.leases} WHERE name = ? AND holder = ? AND token = CAST(? AS SIGNED) LOCK IN SHARE MODE`,
  `SET @ls_now = ${NOW_US}`,
  // A statement of its own: the assignments of one SET all read the variables as they were before it.
  'SET @ls_held = COALESCE(@ls_e > @ls_now, 0)',
];
const termValues = (t: SlotTerm): unknown[] => [t.name, t.holder, t.token.toString()];
const us = (msValue: number | null): number | null => (msValue === null ? null : Math.round(msValue * 1000));
/** At most the bytes one skipped slot's JSON entry adds once inlined: every byte may be escaped, and a comma. */
const skipEntryBytes = (entry: string): number => 2 * Buffer.byteLength(entry, 'utf8') + 1;

export class MysqlSlotLedger implements SlotLedgerPort {
  readonly kind = 'mysql';
  private readonly store: MysqlStore;

  /** `store`: the lease store whose rows fence the ledger's claims. */
  constructor(store: MysqlStore) {
    this.store = store;
  }

  claim(req: SlotClaimRequest): Promise<SlotClaimResult> {
    return this.claimFrom(req, 0);
  }

  private async claimFrom(req: SlotClaimRequest, attempt: number): Promise<SlotClaimResult> {
    if (attempt >= MAX_ATTEMPTS) {
      throw new StoreUnavailableError(`slot "${req.key}" of "${req.name}" changed under ${MAX_ATTEMPTS} claims in a row; this is retryable`);
    }
    const options = req.signal === undefined ? undefined : { signal: req.signal };
    // No lock here, so nothing can wait on it: one statement, one snapshot.
    const [seen] = (await this.store.q(
      `SELECT ${NOW_US} AS now_us,
         (SELECT COUNT(*) FROM ${T.leases} WHERE name = ? AND holder = ? AND token = CAST(? AS SIGNED) AND expires_at_us > ${NOW_US}) AS held, ${COLUMNS}
         FROM (SELECT 1) one LEFT JOIN ${SLOTS} s ON s.name = ? AND s.slot = ?`,
      [...termValues(req), req.name, req.key],
      options,
    )) as (Row & { now_us: string; held: string | number })[] as [Row & { now_us: string; held: string | number }];
    const now = Number(seen.now_us) / 1000;
    const row = seen.token === null ? undefined : toRecord(seen);
    const d = decideSlotClaim(row, req, Number(seen.held) > 0, now);
    const w = d.write;
    if (w.kind === 'none') {
      if (d.outcome === 'done') return { outcome: 'done', storeNowMs: now, record: row! };
      if (d.outcome === 'claimed') return { outcome: 'claimed', storeNowMs: now, rerunOf: d.rerunOf };
      return { outcome: d.outcome, storeNowMs: now };
    }
    const ended = w.status === 'skipped';
    const write =
      w.kind === 'update'
        ? {
            sql: `UPDATE ${SLOTS} SET status = ?, token = CAST(? AS SIGNED), holder = ?, started_at_us = @ls_now, ended_at_us = IF(?, @ls_now, NULL), exit_code = NULL, reason = ?
                   WHERE name = ? AND slot = ? AND token = CAST(? AS SIGNED) AND status = ? AND @ls_held`,
            values: [w.status, req.token.toString(), req.holder, ended, w.reason, req.name, req.key, row!.token.toString(), row!.status],
          }
        : {
            // A row that appeared since the read (a concurrent call of this same term: no other
            // term can write while this one holds the lease row) is left alone; the read-back says.
            sql: `INSERT INTO ${SLOTS} (name, slot, slot_at_us, status, token, holder, started_at_us, ended_at_us, exit_code, reason)
                  SELECT ?, ?, ?, ?, CAST(? AS SIGNED), ?, @ls_now, IF(?, @ls_now, NULL), NULL, ? FROM DUAL WHERE @ls_held
                  ON DUPLICATE KEY UPDATE slot = slot`,
            values: [req.name, req.key, us(req.slotAtMs), w.status, req.token.toString(), req.holder, ended, w.reason],
          };
    const after = last<Row & { held: string | number; n: string | number; now_us: string }>(
      await runBatch(
        this.store,
        [
          ...LOCK_TERM,
          write.sql,
          'SET @ls_n = ROW_COUNT()',
          'COMMIT',
          `SELECT @ls_held AS held, @ls_n AS n, @ls_now AS now_us, ${COLUMNS} FROM (SELECT 1) one LEFT JOIN ${SLOTS} s ON s.name = ? AND s.slot = ?`,
        ].join(';\n'),
        [...termValues(req), ...write.values, req.name, req.key],
        options,
      ),
    );
    const record = after.token === null ? undefined : toRecord(after);
    // An UPDATE matched only the row as read; the INSERT's row is ours to report if it is what
    // this term's claim writes (a concurrent claim of the same term answers the same).
    const took =
      Number(after.held) > 0 &&
      (w.kind === 'update' ? Number(after.n) === 1 : record !== undefined && record.token === req.token && record.status === w.status);
    if (!took) return this.claimFrom(req, attempt + 1);
    const at = Number(after.now_us) / 1000;
    if (d.outcome === 'done') return { outcome: 'done', storeNowMs: at, record: record! };
    return { outcome: 'claimed', storeNowMs: at, rerunOf: d.rerunOf };
  }

  async skip(req: SlotSkipRequest): Promise<{ fenced: boolean; skipped: number; storeNowMs: number }> {
    // [key] or [key, slotAtUs]: JSON_TABLE reads a missing element as NULL.
    const entries = req.slots.map((s) => JSON.stringify(s.slotAtMs === null ? [s.key] : [s.key, us(s.slotAtMs)]));
    // A long backlog (100,000 slots is ~6 MB of JSON) does not fit one packet: one INSERT per
    // part, each its own round trip, all in the one transaction LOCK_TERM opens, so the skip
    // lands whole or not at all. The lease row's share lock then spans the parts' round trips;
    // a process frozen between them loses its session to idle_transaction_timeout (MariaDB).
    const parts = entries.length === 0 ? [[]] : splitByPacket(entries, skipEntryBytes, this.store.maxPacket);
    const insert = `INSERT INTO ${SLOTS} (name, slot, slot_at_us, status, token, holder, started_at_us, ended_at_us, exit_code, reason)
           SELECT ?, j.k, j.t, 'skipped', CAST(? AS SIGNED), ?, @ls_now, @ls_now, NULL, ?
             FROM JSON_TABLE(?, '$[*]' COLUMNS (k ${KEY_COL} PATH '$[0]', t BIGINT PATH '$[1]')) j
            WHERE @ls_held AND NOT EXISTS (SELECT 1 FROM ${SLOTS} s WHERE s.name = ? AND s.slot = j.k)
           ON DUPLICATE KEY UPDATE slot = slot`;
    const batch = parts.map((part, i) => {
      const isFirst = i === 0;
      const isLast = i === parts.length - 1;
      return {
        sql: [
          ...(isFirst ? LOCK_TERM : []),
          insert,
          'SET @ls_n = @ls_n + ROW_COUNT()',
          ...(isLast ? ['COMMIT', 'SELECT @ls_held AS held, @ls_n AS n, @ls_now AS now_us'] : []),
        ].join(';\n'),
        values: [
          ...(isFirst ? termValues(req) : []),
          req.name,
          req.token.toString(),
          req.holder,
          req.reason,
          `[${part.join(',')}]`,
          req.name,
        ],
      };
    });
    const r = last<{ held: string | number; n: string | number; now_us: string }>(await runBatch(this.store, () => batch, []));
    const now = Number(r.now_us) / 1000;
    if (Number(r.held) === 0) return { fenced: true, skipped: 0, storeNowMs: now };
    return { fenced: false, skipped: Number(r.n), storeNowMs: now };
  }

  async complete(req: SlotCompletion): Promise<{ completed: boolean; storeNowMs: number }> {
    // One statement, so no transaction: the row's own token and status are the condition.
    const r = last<{ n: string | number; now_us: string }>(
      (await this.store.q(
        [
          `SET @ls_now = ${NOW_US}`,
          `UPDATE ${SLOTS} SET status = ?, ended_at_us = @ls_now, exit_code = ?, reason = COALESCE(?, reason)
            WHERE name = ? AND slot = ? AND token = CAST(? AS SIGNED) AND status = 'claimed'`,
          'SELECT ROW_COUNT() AS n, @ls_now AS now_us',
        ].join(';\n'),
        [req.status, req.exitCode, req.reason, req.name, req.key, req.token.toString()],
      )) as unknown[],
    );
    return { completed: Number(r.n) === 1, storeNowMs: Number(r.now_us) / 1000 };
  }

  async interruptStale(term: SlotTerm): Promise<{ fenced: boolean; interrupted: number; storeNowMs: number }> {
    const r = last<{ held: string | number; n: string | number; now_us: string }>(
      await runBatch(
        this.store,
        [
          ...LOCK_TERM,
          `UPDATE ${SLOTS} SET status = 'interrupted', ended_at_us = @ls_now, reason = ?
            WHERE name = ? AND status = 'claimed' AND token < CAST(? AS SIGNED) AND @ls_held`,
          'SET @ls_n = ROW_COUNT()',
          'COMMIT',
          'SELECT @ls_held AS held, @ls_n AS n, @ls_now AS now_us',
        ].join(';\n'),
        [...termValues(term), `its term ended before it completed (seen by term ${term.token})`, term.name, term.token.toString()],
      ),
    );
    const now = Number(r.now_us) / 1000;
    if (Number(r.held) === 0) return { fenced: true, interrupted: 0, storeNowMs: now };
    return { fenced: false, interrupted: Number(r.n), storeNowMs: now };
  }

  /**
   * Two statements, each autocommitted: the cutoff (slotPruneCutoff's rule, ledger.ts) read
   * without locks, then a DELETE ... LIMIT that locks only the old, final rows it removes. The
   * cutoff stays safe between them: rows only arrive newer than it.
   */
  async prune(req: SlotPruneRequest): Promise<SlotPruneResult> {
    const [c] = (await this.store.q(
      `SELECT ${NOW_US} AS now_us,
         (SELECT slot_at_us FROM ${SLOTS} WHERE name = ? AND slot_at_us IS NOT NULL ORDER BY slot_at_us DESC LIMIT 1 OFFSET ?) AS k,
         (SELECT MAX(slot_at_us) FROM ${SLOTS} WHERE name = ? AND slot_at_us < ${NOW_US} - ?) AS b`,
      [req.name, Math.max(1, req.keep) - 1, req.name, us(req.olderThanMs)],
    )) as [{ now_us: string; k: string | null; b: string | null }];
    let deleted = 0;
    if (c.k !== null && c.b !== null) {
      const cutoff = BigInt(c.k) < BigInt(c.b) ? c.k : c.b;
      // The keys first, through (name, slot_at_us): a DELETE ... ORDER BY slot_at_us LIMIT is
      // planned on the primary key with a filesort of the name's every row (0.4-0.8 s a batch at
      // 20,000 rows on MariaDB), this in a few ms. The DELETE by primary key checks again.
      const keys = ((await this.store.q(
        `SELECT slot FROM ${SLOTS} FORCE INDEX (leasehold_slots_name_slot_at)
          WHERE name = ? AND slot_at_us < CAST(? AS SIGNED) AND status <> 'claimed' ORDER BY slot_at_us LIMIT ?`,
        [req.name, cutoff, req.limit],
      )) as { slot: string }[]).map((x) => x.slot);
      if (keys.length > 0) {
        const r = (await this.store.q(`DELETE FROM ${SLOTS} WHERE name = ? AND slot IN (?) AND slot_at_us < CAST(? AS SIGNED) AND status <> 'claimed'`, [
          req.name,
          keys,
          cutoff,
        ])) as { affectedRows: number };
        deleted += r.affectedRows;
      }
    }
    if (req.oncePerOlderThanMs !== undefined && deleted < req.limit) {
      const r = (await this.store.q(
        `DELETE FROM ${SLOTS} WHERE name = ? AND slot_at_us IS NULL AND status <> 'claimed' AND ended_at_us < CAST(? AS SIGNED) - ? LIMIT ?`,
        [req.name, c.now_us, us(req.oncePerOlderThanMs), req.limit - deleted],
      )) as { affectedRows: number };
      deleted += r.affectedRows;
    }
    return { deleted, more: deleted >= req.limit, storeNowMs: Number(c.now_us) / 1000 };
  }

  /** The record's assignment comes first: MySQL assigns left to right, so it compares the old token. */
  async putSchedule(record: ScheduleRecord): Promise<void> {
    await this.store.q(
      `INSERT INTO leasehold_schedules (name, token, record, updated_at_us) VALUES (?, CAST(? AS SIGNED), ?, ${NOW_US})
       ON DUPLICATE KEY UPDATE
         record = IF(token <= VALUES(token), VALUES(record), record),
         updated_at_us = IF(token <= VALUES(token), VALUES(updated_at_us), updated_at_us),
         token = GREATEST(token, VALUES(token))`,
      [record.name, record.token.toString(), encodeSchedule(record)],
    );
  }

  async schedules(): Promise<ScheduleRecord[]> {
    return ((await this.store.q('SELECT record FROM leasehold_schedules ORDER BY name')) as { record: string }[]).map((r) => decodeSchedule(r.record));
  }

  async names(): Promise<string[]> {
    return ((await this.store.q(`SELECT DISTINCT name FROM ${SLOTS} ORDER BY name`)) as { name: string }[]).map((r) => r.name);
  }

  async records(name: string, options: { sinceMs?: number; untilMs?: number; limit?: number } = {}): Promise<SlotRecord[]> {
    const since = options.sinceMs === undefined ? null : us(options.sinceMs);
    const until = options.untilMs === undefined ? null : us(options.untilMs);
    const rows = (await this.store.q(
      `SELECT * FROM (SELECT ${COLUMNS} FROM ${SLOTS} s WHERE s.name = ? AND (? IS NULL OR s.slot_at_us > ?) AND (? IS NULL OR s.slot_at_us <= ?)
          ORDER BY COALESCE(s.slot_at_us, s.started_at_us) DESC, s.slot DESC LIMIT ?) x
        ORDER BY COALESCE(x.slot_at_us, x.started_at_us), x.slot`,
      [name, since, since, until, until, options.limit ?? 1000],
    )) as Row[];
    return rows.map(toRecord);
  }

  /** The connections are the lease store's: closing the store closes them. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}

function last<R>(results: unknown[]): R {
  return (results[results.length - 1] as R[])[0]!;
}

const ms = (v: string | number | null): number | null => (v === null ? null : Number(v) / 1000);

function toRecord(r: Row): SlotRecord {
  return {
    name: r.name!,
    key: r.slot!,
    slotAtMs: ms(r.slot_at_us),
    status: r.status!,
    token: BigInt(r.token!),
    holder: r.holder,
    startedAtMs: ms(r.started_at_us),
    endedAtMs: ms(r.ended_at_us),
    exitCode: r.exit_code === null ? null : Number(r.exit_code),
    reason: r.reason,
  };
}
