/**
 * The SQLite store's claim of a batch, inside the write transaction the store opened: the claim
 * rule (src/core/claim-rule.ts) decided in TypeScript on the row as it is under the file's write
 * lock, with the common renewal as one conditional statement, and liveness 'session' ending a
 * term whose holder process is gone (./session.ts) before the rule sees the row.
 */
import type { ClaimRequest, ClaimResult } from '../store.js';
import { CONFLICT_DETAIL, decideClaim, type LeaseRowState } from '../../core/claim-rule.js';
import type { SqliteDatabaseLike, SqliteStatementLike } from './store.js';
import { T } from './schema.js';
import { decodeSession, holderGone, SESSION_ENDED_DETAIL } from './session.js';

/** A lease row as SQLite returns it (integers as bigint). */
export interface LeaseRow {
  name: string;
  holder: string | null;
  nonce: string | null;
  token: bigint;
  expires_at: bigint | null;
  term_started_at: bigint | null;
  renewed_at: bigint | null;
  ended_by: 'released' | 'revoked' | 'conflict' | null;
  session_id?: string | null;
  session_token?: bigint | null;
}

export function rowState(row: LeaseRow): LeaseRowState {
  return {
    holder: row.holder,
    nonce: row.nonce,
    token: row.token,
    expiresAtMs: row.expires_at === null ? null : Number(row.expires_at),
    endedBy: row.ended_by,
  };
}

/** The store's prepared-statement cache: `safe` reads integers as bigint. */
type Prepare = (sql: string, safe?: boolean) => SqliteStatementLike;

/** Every request of the batch, in order, at the store's `now`, above the token `floor`. */
export function claimBatch(db: SqliteDatabaseLike, stmt: Prepare, requests: readonly ClaimRequest[], now: number, floor: bigint): ClaimResult[] {
  const get = stmt(`SELECT * FROM ${T.leases} WHERE name = ?`, true);
  const insert = stmt(`INSERT INTO ${T.leases} (name, holder, nonce, token, expires_at, term_started_at, renewed_at) VALUES (?, ?, ?, ?, ?, ?, ?)`);
  const acquire = stmt(`UPDATE ${T.leases} SET holder = ?, nonce = ?, token = ?, expires_at = ?, term_started_at = ?, renewed_at = ?, ended_by = NULL WHERE name = ?`);
  const renew = stmt(`UPDATE ${T.leases} SET nonce = ?, expires_at = ?, renewed_at = ? WHERE name = ?`);
  // The claim rule's "renewed" case as one statement (live, our holder id, a nonce we
  // expect): the common renewal is one row write instead of a read, a decision and a write.
  // Anything it does not match goes through decideClaim below, in the same transaction.
  const renewIfOurs = stmt(
    `UPDATE ${T.leases} SET nonce = ?, expires_at = ?, renewed_at = ?
      WHERE name = ? AND holder = ? AND nonce IN (?, ?) AND expires_at IS NOT NULL AND expires_at > ? RETURNING token`,
    true,
  );
  const conflict = stmt(`UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at = ?, ended_by = 'conflict' WHERE name = ?`);
  const hist = stmt(`INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`);
  return requests.map((req): ClaimResult => {
    if (req.expect !== null && req.expect.length > 0 && req.expect.length <= 2) {
      const expiresAtMs = now + Math.round(req.ttlMs);
      const kept = renewIfOurs.get(req.nextNonce, expiresAtMs, now, req.name, req.holder, req.expect[0], req.expect[1] ?? req.expect[0], now) as { token: bigint } | undefined;
      if (kept !== undefined) return { name: req.name, outcome: 'renewed', token: kept.token, holder: req.holder, expiresAtMs, storeNowMs: now };
    }
    let raw = get.get(req.name) as LeaseRow | undefined;
    if (req.session !== undefined && raw !== undefined && endOrphan(db, raw, now)) raw = get.get(req.name) as LeaseRow | undefined;
    const refused = releasedSince(raw, req, now);
    if (refused !== undefined) return refused;
    const d = decideClaim(raw === undefined ? undefined : rowState(raw), req, now, floor);
    switch (d.outcome) {
      case 'acquired':
        if (raw === undefined) insert.run(req.name, req.holder, req.nextNonce, d.token, d.expiresAtMs, now, now);
        else acquire.run(req.holder, req.nextNonce, d.token, d.expiresAtMs, now, now, req.name);
        hist.run(req.name, d.event, req.holder, d.previousHolder, d.token, now, null);
        if (req.session !== undefined) db.prepare(`UPDATE ${T.leases} SET session_id = ?, session_token = token WHERE name = ?`).run(req.session, req.name);
        return { name: req.name, outcome: 'acquired', token: d.token, holder: req.holder, expiresAtMs: d.expiresAtMs, storeNowMs: now, ...(req.session === undefined ? {} : { session: true }) };
      case 'renewed':
        renew.run(req.nextNonce, d.expiresAtMs, now, req.name);
        return { name: req.name, outcome: 'renewed', token: d.token, holder: req.holder, expiresAtMs: d.expiresAtMs, storeNowMs: now };
      case 'busy':
        return { name: req.name, outcome: 'busy', holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs, storeNowMs: now, ...grantedAt(raw) };
      case 'lost':
        if (d.endTerm) {
          conflict.run(now, req.name);
          hist.run(req.name, 'conflict', null, req.holder, d.token, now, CONFLICT_DETAIL);
        }
        return { name: req.name, outcome: 'lost', reason: d.reason, holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs, storeNowMs: now };
    }
  });
}

/**
 * A term granted since the contender's `unlessReleasedSince` and released by its live holder
 * did what this contender came for (port.ts): refused, nothing granted, no write, no token spent.
 */
function releasedSince(raw: LeaseRow | undefined, req: ClaimRequest, now: number): ClaimResult | undefined {
  if (req.expect !== null || req.unlessReleasedSince === undefined || raw === undefined) return undefined;
  if (raw.holder !== null || raw.ended_by !== 'released' || raw.term_started_at === null || Number(raw.term_started_at) < req.unlessReleasedSince) return undefined;
  return { name: req.name, outcome: 'busy', holder: null, token: raw.token, expiresAtMs: null, storeNowMs: now, releasedSince: true };
}

/** ClaimResult's grantedAtMs for a busy answer: when the holding term began. */
function grantedAt(raw: LeaseRow | undefined): { grantedAtMs?: number } {
  return raw?.term_started_at == null ? {} : { grantedAtMs: Number(raw.term_started_at) };
}

/**
 * Contenders only, before the write lock: the answers that a committed snapshot already settles
 * and that write nothing (a live term is 'busy'; a released-since term refuses), or undefined
 * when any request in the batch needs the write transaction. Ten replicas contending for a
 * slot's term at one instant would otherwise queue each refusal behind the file's write lock,
 * and the winner's own next writes (its ledger claim) behind them. A snapshot's 'busy' was true
 * when it was read, as one under the lock is when the lock was taken. Liveness 'session'
 * requests take the lock: their claim may end an orphaned term first.
 */
export function refusedFromSnapshot(stmt: Prepare, requests: readonly ClaimRequest[], now: number): ClaimResult[] | undefined {
  if (requests.some((r) => r.expect !== null || r.session !== undefined)) return undefined;
  const get = stmt(`SELECT * FROM ${T.leases} WHERE name = ?`, true);
  const out: ClaimResult[] = [];
  for (const req of requests) {
    const raw = get.get(req.name) as LeaseRow | undefined;
    const refused = releasedSince(raw, req, now);
    if (refused !== undefined) {
      out.push(refused);
      continue;
    }
    if (raw === undefined) return undefined;
    const d = decideClaim(rowState(raw), req, now);
    if (d.outcome !== 'busy') return undefined;
    out.push({ name: req.name, outcome: 'busy', holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs, storeNowMs: now, ...grantedAt(raw) });
  }
  return out;
}

/**
 * Liveness 'session' (./session.ts): inside the claim's transaction, ends a held, unexpired term
 * whose recorded process is gone, as a revocation ends one. True when it ended one.
 */
function endOrphan(db: SqliteDatabaseLike, row: LeaseRow, now: number): boolean {
  if (row.holder === null || row.expires_at === null || Number(row.expires_at) <= now) return false;
  if (row.session_id == null || row.session_token !== row.token) return false;
  const recorded = decodeSession(row.session_id);
  if (recorded === undefined || !holderGone(recorded)) return false;
  db.prepare(`UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at = ?, ended_by = 'revoked' WHERE name = ?`).run(now, row.name);
  db.prepare(`INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at, detail) VALUES (?, 'revoked', NULL, ?, ?, ?, ?)`).run(
    row.name,
    row.holder,
    row.token,
    now,
    `${SESSION_ENDED_DETAIL} (pid ${recorded.pid})`,
  );
  return true;
}
