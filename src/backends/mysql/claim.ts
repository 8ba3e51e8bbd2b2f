/**
 * The claim rule (core/claim-rule.ts) in MySQL, one round trip per batch.
 *
 * MySQL has no function that could return a claim's answers the way PostgreSQL's does, and a
 * transaction the client drives over several round trips would keep its row locks while the
 * client is frozen. So every write a claim makes is a statement whose own WHERE clause is the
 * rule's condition, evaluated by the server on the row as it is under lock, and the statements of
 * a batch travel together (multipleStatements): the server runs them back to back, with no
 * client round trip while any lock is held. The client only reads the rows afterwards and tells
 * which writes took (a renewal or an acquisition sets the request's fresh nonce, which nothing
 * else can) and, for the requests that wrote nothing, reads the answer off the row with
 * `decideClaim` itself.
 *
 * The batch is one transaction, from its first write to the read-back:
 *  - Renewals: one UPDATE joined to the batch (JSON_TABLE), where holder, nonce and expiry say so.
 *  - Contenders: one lease after another in name order: lock the row, read its expiry and the server's clock
 *    now, and acquire if free or expired, with a token above the row's, the floor and every
 *    token ever issued (the counter row in leasehold_tokens). Renewals and contentions each
 *    lock in name order; two batches that renew and contend crosswise can still deadlock, which
 *    InnoDB detects at once and the store retries (store.ts, withLockRetry).
 *  - A clone conflict (our holder id, a nonce we do not hold, a live term) is rare: a second
 *    round trip ends that term, again under the condition that it is still so.
 */

/*
 * TOKENS. An acquisition's token is the largest of: the name's last token + 1, the floor + 1,
 * the last token issued for any name + 1, and the server's clock in microseconds. The clock is
 * what makes an asynchronous failover safe: a replica promoted after the primary died has not
 * seen the primary's last commits, so every counter it holds may be behind, but its clock is
 * not (NTP keeps servers within milliseconds; a failover takes seconds). MariaDB has nothing
 * like PostgreSQL's timeline, which the PostgreSQL store puts in its tokens: GTID domains and
 * server ids are configuration, not a count of promotions. The bound this relies on, written
 * in the README: the promoted server's clock is not behind the old primary's by more than the
 * failover took, and the old primary did not issue tokens faster than one per microsecond for
 * longer than that. Tokens near 1.8e15 stay far inside a BIGINT (9.2e18).
 */
import { CONFLICT_DETAIL, decideClaim, type LeaseRowState } from '../../core/claim-rule.js';
import type { ClaimRequest, ClaimResult } from '../../core/port.js';
import { NOW_US, T } from './schema.js';
import { serverStartSql, sessionLockName, SESSION_ENDED_DETAIL } from './session.js';

export interface LeaseRow {
  name: string;
  holder: string | null;
  nonce: string | null;
  token: string;
  expires_at_us: string | null;
  ended_by: LeaseRowState['endedBy'];
  now_us: string;
  /** When the term on the row began (read back by a batch with contenders). */
  term_started_at_us?: string | null;
  /** The connection the current term is tied to (liveness 'session', ./session.ts), or null. */
  session_conn?: string | null;
  /** Liveness 'session': the claim was not granted because the session lock was free (1). */
  session_lock_free?: number | string | null;
}

/** A batch's statements and how to read its answers. */
interface ClaimPlan {
  sql: string;
  values: unknown[];
  /** Which result of the multi-statement answer holds the rows read back. */
  rowsAt: number;
}

const NAME_COL = 'VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin';
const HOLDER_COL = 'VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin';
const NONCE_COL = 'VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin';
const NONCES_COL = 'VARCHAR(600) CHARACTER SET ascii COLLATE ascii_bin';

/** What a batch depends on about the server it goes to. */
interface ClaimServer {
  database: string;
  mariadb: boolean;
  /**
   * The schema has `waiter_accepts` (migration 10): a registration says that this process
   * accepts offers. False on an older schema (../store.ts learns it from the server's refusal).
   */
  waiterAccepts?: boolean;
}

/** TTLs are honoured to the millisecond, as the rule rounds them. */
const ttlUs = (r: ClaimRequest): number => Math.round(r.ttlMs) * 1000;

/**
 * The statements of one batch. `requests` in name order; `retry`: an earlier attempt of this
 * call may have renewed already, so a renewal also accepts its own fresh nonce.
 */
export function planClaim(requests: readonly ClaimRequest[], retry: boolean, server: ClaimServer = { database: '', mariadb: true }): ClaimPlan {
  const { database } = server;
  const parts: string[] = [];
  const values: unknown[] = [];
  let results = 0;
  const add = (sql: string, ...v: unknown[]): void => {
    parts.push(sql);
    values.push(...v);
    results++;
  };
  const renewals = requests.filter((r) => r.expect !== null);
  const contenders = requests.filter((r) => r.expect === null);
  if (contenders.length > 0) {
    // Rows exist before the transaction locks them (committed on their own: an empty row is no
    // term), so the locking reads below never take gap locks.
    add(`INSERT IGNORE INTO ${T.leases} (name) VALUES ?`, contenders.map((r) => [r.name]));
  }
  // One transaction to the read-back: a row this batch wrote stays locked until its answer is
  // read, so a clone's conflict (or a revocation) cannot land between the write and the read and
  // turn a renewal that happened into a 'lost'.
  add('START TRANSACTION');
  if (renewals.length > 0) {
    const batch = renewals.map((r) => [r.name, r.holder, (retry ? [...r.expect!, r.nextNonce] : r.expect!).join(','), r.nextNonce, ttlUs(r)]);
    add(`SET @lh_now = ${NOW_US}`);
    add(
      `UPDATE ${T.leases} l JOIN JSON_TABLE(?, '$[*]' COLUMNS (
         name ${NAME_COL} PATH '$[0]', holder ${HOLDER_COL} PATH '$[1]', expect ${NONCES_COL} PATH '$[2]',
         nxt ${NONCE_COL} PATH '$[3]', ttl_us BIGINT PATH '$[4]')) r ON l.name = r.name
       SET l.nonce = r.nxt, l.expires_at_us = @lh_now + r.ttl_us, l.renewed_at_us = @lh_now
       WHERE l.holder = r.holder AND FIND_IN_SET(l.nonce, r.expect) > 0 AND l.expires_at_us > @lh_now`,
      JSON.stringify(batch),
    );
  }
  if (contenders.some((r) => r.session !== undefined)) add(`SET @lh_srv = ${serverStartSql(server.mariadb)}`);
  if (contenders.length > 0) {
    contenders.forEach((r, i) => {
      add(`SET @p${i} = NULL, @e${i} = NULL, @t${i} = NULL, @k${i} = NULL`);
      if (r.session === undefined) {
        add(`SELECT holder, expires_at_us, token, ended_by, term_started_at_us INTO @p${i}, @e${i}, @t${i}, @b${i}, @s${i} FROM ${T.leases} WHERE name = ? FOR UPDATE`, r.name);
      } else {
        endOrphan(add, i, r.name, sessionLockName(database, r.name));
        rivalLock(add, i, r, sessionLockName(database, r.name), server.mariadb);
      }
      // The clock is read after the lock: a wait for it must not make a live term look expired
      // or an expired one live for longer.
      add(`SET @n${i} = ${NOW_US}, @a${i} = (@p${i} IS NULL OR @e${i} <= ${NOW_US})`);
      // ClaimRequest.unlessReleasedSince: a term begun since then and released by its holder did
      // what this contender came for; nothing granted (readAnswers says so from the row).
      if (r.session === undefined && r.unlessReleasedSince !== undefined) add(`SET @a${i} = (@a${i} AND NOT (@p${i} IS NULL AND @b${i} <=> 'released' AND @s${i} >= ?))`, sinceUs(r.unlessReleasedSince));
      if (r.session !== undefined) {
        // A free lease with the session lock free too: a term granted now would be tied to
        // nothing (the claimant's session missed the lock, and whoever held it has let go
        // since). Not granted: answered 'busy' with the flag, the contender's session takes the
        // lock and claims again at once. With a rival about to claim: not granted either.
        add(`SET @f${i} = (@a${i} AND @u${i} IS NULL)`);
        add(`SET @a${i} = (@a${i} AND NOT @f${i} AND NOT @r${i})`);
      }
      add(`SELECT GREATEST(last, floor, @t${i}) + 1 INTO @k${i} FROM ${T.tokens} WHERE id = 1 AND @a${i} FOR UPDATE`);
      // The counter row is gone only if someone emptied the table; the name's own token still
      // holds. And never below the server's clock in microseconds: see TOKENS below.
      add(`SET @k${i} = IF(@a${i}, GREATEST(COALESCE(@k${i}, @t${i} + 1), @n${i}), NULL)`);
      add(`INSERT INTO ${T.tokens} (id, last) SELECT 1, @k${i} FROM DUAL WHERE @a${i} ON DUPLICATE KEY UPDATE last = GREATEST(last, VALUES(last))`);
      // A waiter that takes the lease itself is waiting no more. MySQL assigns SET clauses left to
      // right, each seeing the ones before it: `waiter` goes last, after the columns tested on it.
      add(
        `UPDATE ${T.leases} SET holder = ?, nonce = ?, token = @k${i}, expires_at_us = @n${i} + ?, term_started_at_us = @n${i},
           renewed_at_us = @n${i}, ended_by = NULL, waiter_nonce = IF(waiter <=> ?, NULL, waiter_nonce),
           waiter_ttl_us = IF(waiter <=> ?, NULL, waiter_ttl_us), waiter_until_us = IF(waiter <=> ?, NULL, waiter_until_us),
           waiter = IF(waiter <=> ?, NULL, waiter) WHERE name = ? AND @a${i}`,
        r.holder, r.nextNonce, ttlUs(r), r.holder, r.holder, r.holder, r.holder, r.name,
      );
      if (r.handoff !== undefined && r.handoff.length > 0) {
        // A term a release handed to this contender (under a nonce it registered under) is an
        // offer until this claim accepts it: the waiter's own TTL from now, under this claim's
        // nonce (planAccept says why). The clock @n was read after the row lock.
        add(
          `UPDATE ${T.leases} SET nonce = ?, expires_at_us = @n${i} + ?, renewed_at_us = @n${i}
             WHERE name = ? AND NOT @a${i} AND holder = ? AND FIND_IN_SET(nonce, ?) > 0 AND expires_at_us > @n${i}`,
          r.nextNonce, ttlUs(r), r.name, r.holder, r.handoff.join(','),
        );
      }
      if (r.handoff !== undefined) {
        // A contender that will wait, told 'busy': the waiter a release hands the term to
        // (sql/006-handover.ts), replacing any earlier one (the latest is the one seen alive). Never
        // the waiter of its own term: a row we hold under a nonce we registered is a handed term.
        // `waiter_accepts` tells the release that this registration accepts offers
        // (sql/010-handover-acceptance.ts): the registered nonce, so that a later registration by
        // a process of the previous version, which does not know the column, never inherits it.
        const accepts = server.waiterAccepts === false ? '' : ', waiter_accepts = ?';
        add(
          `UPDATE ${T.leases} SET waiter = ?, waiter_nonce = ?, waiter_ttl_us = ?, waiter_until_us = @n${i} + 2 * ?${accepts}
             WHERE name = ? AND NOT @a${i} AND @p${i} <> ?`,
          ...[r.holder, r.nextNonce, ttlUs(r), ttlUs(r)], ...(accepts === '' ? [] : [r.nextNonce]), r.name, r.holder,
        );
      }
      add(
        `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at_us, detail)
           SELECT ?, IF(@p${i} IS NULL, 'acquired', 'takeover'), ?, @p${i}, @k${i}, @n${i}, NULL FROM DUAL WHERE @a${i}`,
        r.name, r.holder,
      );
      if (r.session !== undefined) {
        // The term this contender now holds (acquired here, or handed to it by a release) is tied
        // to its session only if that session holds the lease's session lock at this moment: a
        // frozen old holder whose term expired may still hold it, and its connection's end must
        // not end this term.
        add(
          `UPDATE ${T.leases} SET session_conn = ?, session_token = token, session_server = @lh_srv
             WHERE name = ? AND holder = ? AND expires_at_us > @n${i} AND (nonce = ? OR FIND_IN_SET(nonce, ?) > 0)
               AND IS_USED_LOCK(?) <=> ?`,
          r.session, r.name, r.holder, r.nextNonce, (r.handoff ?? []).join(','), sessionLockName(database, r.name), r.session,
        );
      }
    });
  }
  // A row that does not exist is not read back: a renewal of a name never claimed.
  const lockFree = contenders.flatMap((r, i) => (r.session === undefined ? [] : [{ name: r.name, i }]));
  parts.push(
    `SELECT name, holder, nonce, token, expires_at_us, ended_by, term_started_at_us, ${NOW_US} AS now_us, IF(session_token <=> token, session_conn, NULL) AS session_conn` +
      (lockFree.length === 0 ? '' : `, CASE name ${lockFree.map((f) => `WHEN ? THEN @f${f.i}`).join(' ')} ELSE 0 END AS session_lock_free`) +
      ` FROM ${T.leases} WHERE name IN (?)`,
  );
  values.push(...lockFree.map((f) => f.name), requests.map((r) => r.name));
  // The server's clock on its own: a batch of renewals of names never claimed reads no row.
  parts.push(`SELECT ${NOW_US} AS now_us`);
  parts.push('COMMIT');
  return { sql: parts.join(';\n'), values, rowsAt: results };
}

/**
 * A contender's read of the row (into @p, @e, @t as the plain claim reads it), first ending the
 * term if it is held, unexpired, tied to a session on this server instance, and that session no
 * longer holds the session lock (IS_USED_LOCK: free, or another connection's): as a revocation
 * ends one, with its history row. The acquisition that follows then finds the lease free.
 */
function endOrphan(add: (sql: string, ...v: unknown[]) => void, i: number, name: string, lock: string): void {
  add(
    `SELECT holder, expires_at_us, token, IF(session_token <=> token, session_conn, NULL), session_server
       INTO @p${i}, @e${i}, @t${i}, @sc${i}, @ss${i} FROM ${T.leases} WHERE name = ? FOR UPDATE`,
    name,
  );
  // Within 2 s: the start time is the clock less the uptime, both in whole seconds, read apart.
  add(`SET @d${i} = (@p${i} IS NOT NULL AND @e${i} > ${NOW_US} AND @sc${i} IS NOT NULL AND ABS(@ss${i} - @lh_srv) <= 2 AND NOT (IS_USED_LOCK(?) <=> @sc${i}))`, lock);
  add(`UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at_us = ${NOW_US}, ended_by = 'revoked' WHERE name = ? AND @d${i}`, name);
  add(
    `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at_us, detail)
       SELECT ?, 'revoked', NULL, @p${i}, @t${i}, ${NOW_US}, CONCAT(?, ' (connection ', @sc${i}, ')') FROM DUAL WHERE @d${i}`,
    name, SESSION_ENDED_DETAIL,
  );
  add(`SET @p${i} = IF(@d${i}, NULL, @p${i}), @e${i} = IF(@d${i}, NULL, @e${i})`);
}

/**
 * Liveness 'session': whether another connection holds the lease's session lock as a contender
 * about to claim (into @r): not this request's session, not the current term's recorded one (a
 * frozen holder whose term expired keeps its lock and must not block the lease), and it ran a
 * statement within the grace (least of 2 s and a quarter of the TTL). Such a claim is not
 * granted (the acquisition's condition is false, and the answer reads 'busy'): the lock
 * holder's claim follows within milliseconds and wins a term tied to its session. Without this,
 * contenders that open their sessions at once (per-slot cron, every slot) had the lock and the
 * term go to two of them, and the term ended at its TTL, not at its holder's death. The grace
 * bounds what a contender frozen between its lock and its claim costs; after it, the claim is
 * granted as a 'ttl' term, as before. PROCESSLIST shows another user's connections only with
 * the PROCESS privilege: without it a lock held by another user's connection never refuses.
 * MySQL has whole seconds only (TIME); MariaDB has TIME_MS.
 */
function rivalLock(add: (sql: string, ...v: unknown[]) => void, i: number, r: ClaimRequest, lock: string, mariadb: boolean): void {
  // The lock's holder is read once (into @u): the rival rule and the free-lock rule decide on
  // one reading, so a holder that lets go between two reads cannot make both say "grant".
  // The recorded session is passed over only while its term is on the row (expired: a frozen
  // holder): a holder releasing over its session lets the lock go just after its COMMIT
  // (./session.ts), and a claim in between, finding the row released and the lock still the
  // recorded session's, was granted untied; now that session is a rival, fresh from its release.
  add(`SET @u${i} = IS_USED_LOCK(?)`, lock);
  add(
    `SET @r${i} = EXISTS (SELECT 1 FROM information_schema.PROCESSLIST
       WHERE ID = @u${i} AND ID <> ? AND NOT (ID <=> @sc${i} AND @p${i} IS NOT NULL) AND ${mariadb ? 'TIME_MS' : 'TIME * 1000'} < LEAST(2000, ? / 4))`,
    r.session, Math.round(r.ttlMs),
  );
}

function rowState(row: LeaseRow): LeaseRowState {
  return {
    holder: row.holder,
    nonce: row.nonce,
    token: BigInt(row.token),
    expiresAtMs: row.expires_at_us === null ? null : Number(row.expires_at_us) / 1000,
    endedBy: row.ended_by,
  };
}

/** What the batch answered, and the clone conflicts left to end. */
export function readAnswers(requests: readonly ClaimRequest[], rows: readonly LeaseRow[], serverNowUs: string): { results: ClaimResult[]; conflicts: ClaimRequest[] } {
  const byName = new Map(rows.map((r) => [r.name, r]));
  const anyNow = Number(serverNowUs) / 1000;
  const conflicts: ClaimRequest[] = [];
  const results = requests.map((req): ClaimResult => {
    const row = byName.get(req.name);
    const storeNowMs = row === undefined ? anyNow : Number(row.now_us) / 1000;
    if (row !== undefined && row.holder === req.holder && row.nonce === req.nextNonce) {
      // Our fresh nonce is on the row: this batch's write took.
      const expiresAtMs = Number(row.expires_at_us) / 1000;
      return { name: req.name, outcome: req.expect === null ? 'acquired' : 'renewed', token: BigInt(row.token), holder: req.holder, expiresAtMs, storeNowMs, ...tied(req, row) };
    }
    if (releasedSince(req, row)) return { name: req.name, outcome: 'busy', holder: null, token: BigInt(row!.token), expiresAtMs: null, storeNowMs, releasedSince: true };
    const state = row === undefined || row.expires_at_us === null && row.holder === null && row.token === '0' ? undefined : rowState(row);
    const d = decideClaim(state, req, storeNowMs);
    switch (d.outcome) {
      case 'busy':
        return { name: req.name, outcome: 'busy', holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs, storeNowMs, ...grantedAt(row) };
      case 'lost':
        if (d.endTerm) conflicts.push(req);
        return { name: req.name, outcome: 'lost', reason: d.reason, holder: d.holder, token: d.token, expiresAtMs: d.expiresAtMs, storeNowMs };
      default:
        // The row allows what this batch's write did not do: it changed between the write and
        // the read (expired there). Not a yes.
        return req.expect === null
          ? { name: req.name, outcome: 'busy', holder: row?.holder ?? null, token: row === undefined ? null : BigInt(row.token), expiresAtMs: state?.expiresAtMs ?? null, storeNowMs, ...lockFreeFlag(req, row) }
          : { name: req.name, outcome: 'lost', reason: 'expired', holder: row?.holder ?? null, token: row === undefined ? null : BigInt(row.token), expiresAtMs: state?.expiresAtMs ?? null, storeNowMs };
    }
  });
  return { results, conflicts };
}

/** unlessReleasedSince in the row's microseconds. */
function sinceUs(ms: number): string {
  return String(Math.ceil(ms * 1000));
}

/** The row shows a term begun since the contender's unlessReleasedSince and released by its holder (the batch refused it). */
function releasedSince(req: ClaimRequest, row: LeaseRow | undefined): boolean {
  if (req.expect !== null || req.session !== undefined || req.unlessReleasedSince === undefined || row === undefined) return false;
  return row.holder === null && row.ended_by === 'released' && row.term_started_at_us != null && BigInt(row.term_started_at_us) >= BigInt(sinceUs(req.unlessReleasedSince));
}

/** ClaimResult's grantedAtMs for a busy answer: when the holding term began. */
function grantedAt(row: LeaseRow | undefined): { grantedAtMs?: number } {
  return row?.term_started_at_us == null ? {} : { grantedAtMs: Number(row.term_started_at_us) / 1000 };
}

/** Liveness 'session': the claim was refused because the session lock was free (take it and claim again). */
function lockFreeFlag(req: ClaimRequest, row: LeaseRow | undefined): { sessionLockFree?: true } {
  return req.session !== undefined && row?.session_lock_free != null && Number(row.session_lock_free) === 1 ? { sessionLockFree: true } : {};
}

/** Liveness 'session': whether the term on the row is tied to the request's session. */
function tied(req: ClaimRequest, row: LeaseRow): { session?: boolean } {
  if (req.session === undefined) return {};
  return { session: row.session_conn != null && String(row.session_conn) === req.session };
}

/**
 * The answer to `req` when the row shows that an acceptance (planAccept) took: our holder id,
 * the nonce that claim sent (the acceptance swapped it in, and nothing else sets it), live.
 * Undefined otherwise: the caller then runs the whole claim.
 */
export function acceptedTerm(req: ClaimRequest, row: LeaseRow): ClaimResult | undefined {
  if (req.expect !== null || req.handoff === undefined || row.holder !== req.holder || row.nonce !== req.nextNonce) return undefined;
  if (row.expires_at_us === null || Number(row.expires_at_us) <= Number(row.now_us)) return undefined;
  return {
    name: req.name,
    outcome: 'acquired',
    token: BigInt(row.token),
    holder: req.holder,
    expiresAtMs: Number(row.expires_at_us) / 1000,
    storeNowMs: Number(row.now_us) / 1000,
  };
}

/**
 * A woken waiter's claim, first as an acceptance of the terms a release handed it (no INSERT, no
 * token, one UPDATE): when a release handed every request its term, this is the whole claim.
 * Otherwise (or when it fails) the caller runs the claim, which accepts too. A handed term is an
 * offer that lapses at the end of its acceptance window (sql/010-handover-acceptance.ts). In
 * order:
 *  1. The rows, locked in name order as every claim locks them (two batches never wait on each
 *     other). The order is the primary key's: the `IN` list is read as a range scan of the
 *     key, which is the name (MariaDB drops an ORDER BY inside a derived table, so the clause
 *     documents the intent and the scan keeps it). The lock waits for a release's commit in flight (the release lets the named lock
 *     go right after its COMMIT has answered: ./freed.ts).
 *  2. The server's clock, read after the lock: an offer that lapsed while this claim waited for
 *     the row is not accepted (a statement's clock is its start, so one read before the lock
 *     would be the time the wait began).
 *  3. The UPDATE: the waiter's own TTL from that clock, only while the row still holds the handed
 *     term, unexpired, under one of the nonces the waiter registered under. It swaps the nonce
 *     for this claim's next one, a compare-and-swap: of two clones that share the holder id and
 *     the registered nonces, the first to accept holds the term, and the other finds a nonce it
 *     never registered and is answered 'busy'.
 *  4. The rows read back (ACCEPT_ROWS_AT), with that clock: acceptedTerm reads each.
 */
export function planAccept(requests: readonly ClaimRequest[]): { sql: string; values: unknown[] } {
  const batch = requests.map((r) => [r.name, r.holder, (r.handoff ?? []).join(','), r.nextNonce, ttlUs(r)]);
  const names = requests.map((r) => r.name);
  return {
    sql: [
      'START TRANSACTION',
      `SELECT COUNT(*) INTO @lh_seen FROM (SELECT name FROM ${T.leases} WHERE name IN (?) ORDER BY name FOR UPDATE) x`,
      `SET @lh_now = ${NOW_US}`,
      `UPDATE ${T.leases} l JOIN JSON_TABLE(?, '$[*]' COLUMNS (
         name ${NAME_COL} PATH '$[0]', holder ${HOLDER_COL} PATH '$[1]', handoff ${NONCES_COL} PATH '$[2]',
         nxt ${NONCE_COL} PATH '$[3]', ttl_us BIGINT PATH '$[4]')) r ON l.name = r.name
       SET l.nonce = r.nxt, l.expires_at_us = @lh_now + r.ttl_us, l.renewed_at_us = @lh_now
       WHERE l.holder = r.holder AND FIND_IN_SET(l.nonce, r.handoff) > 0 AND l.expires_at_us > @lh_now`,
      `SELECT name, holder, nonce, token, expires_at_us, ended_by, @lh_now AS now_us FROM ${T.leases} WHERE name IN (?)`,
      'COMMIT',
    ].join(';\n'),
    values: [names, JSON.stringify(batch), names],
  };
}
export const ACCEPT_ROWS_AT = 4;

/** Ends the terms two processes renewed (store.ts expectation 4b), each only if it is still so. */
export function planConflicts(conflicts: readonly ClaimRequest[]): { sql: string; values: unknown[] } {
  const parts: string[] = ['START TRANSACTION'];
  const values: unknown[] = [];
  conflicts.forEach((r, i) => {
    parts.push(`SET @c${i} = NULL, @ct${i} = NULL`);
    parts.push(
      `SELECT holder, token INTO @c${i}, @ct${i} FROM ${T.leases}
         WHERE name = ? AND holder = ? AND expires_at_us > ${NOW_US} AND (nonce IS NULL OR FIND_IN_SET(nonce, ?) = 0) FOR UPDATE`,
    );
    values.push(r.name, r.holder, r.expect!.join(','));
    parts.push(`SET @cn${i} = ${NOW_US}`);
    parts.push(`UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at_us = @cn${i}, ended_by = 'conflict' WHERE name = ? AND @c${i} IS NOT NULL`);
    values.push(r.name);
    parts.push(
      `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at_us, detail)
         SELECT ?, 'conflict', NULL, @c${i}, @ct${i}, @cn${i}, ? FROM DUAL WHERE @c${i} IS NOT NULL`,
    );
    values.push(r.name, CONFLICT_DETAIL);
  });
  parts.push('COMMIT');
  return { sql: parts.join(';\n'), values };
}
