/**
 * Ending terms: a release by the holder, an operator's revocation, and many releases in one
 * round trip (releaseMany). One set of statements ends one row for all three, so the batch
 * cannot drift from the single release.
 */
import type { ReleaseRequest } from '../../core/port.js';
import { NOW_US, T } from './schema.js';

/**
 * The statements that end one term inside the caller's transaction: lock the row, read who
 * holds it if the caller may end it, end it and record it. They leave `@lh_seen` (the row's
 * token, NULL when the row does not exist) and `@lh_prev` (the holder whose term ended, NULL
 * when nothing ended). `by`: the holder's own release (its holder id and one of its nonces), or
 * null for a revocation (any live holder).
 *
 * A holder's release hands the term to the registered waiter (sql/006-handover.ts) when there is
 * one other than the releasing holder whose registration has not lapsed: a new term in the same
 * transaction, its token by the acquisition's rule (./claim.ts, TOKENS: the counter row is locked
 * and raised only then), the waiter's nonce and TTL, history 'released' then 'acquired'. A
 * caller that is not the holder but the registered waiter (the nonce it registered under) is
 * withdrawing: its registration is cleared, and nothing ends. A revocation hands nothing over.
 */
export function endTermStatements(name: string, event: 'released' | 'revoked', detail: string | null, by: ReleaseRequest | null): { sql: string[]; values: unknown[] } {
  if (by === null) {
    return {
      sql: [
        'SET @lh_prev = NULL, @lh_tok = NULL, @lh_seen = NULL',
        `SELECT token, holder, token INTO @lh_seen, @lh_prev, @lh_tok FROM ${T.leases} WHERE name = ? FOR UPDATE`,
        `SET @lh_now = ${NOW_US}`,
        `UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at_us = @lh_now, ended_by = ? WHERE name = ? AND @lh_prev IS NOT NULL`,
        `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at_us, detail)
           SELECT ?, ?, NULL, @lh_prev, @lh_tok, @lh_now, ? FROM DUAL WHERE @lh_prev IS NOT NULL`,
      ],
      values: [name, event, name, name, event, detail],
    };
  }
  const expect = by.expect.join(',');
  return {
    sql: [
      'SET @lh_prev = NULL, @lh_tok = NULL, @lh_seen = NULL, @lh_w = NULL, @lh_wn = NULL, @lh_wt = NULL, @lh_wu = NULL, @lh_k = NULL',
      // One read under the row lock: who holds it, whether it is ours, and who waits for it.
      `SELECT token, IF(holder = ? AND FIND_IN_SET(nonce, ?) > 0, holder, NULL), token, waiter, waiter_nonce, waiter_ttl_us, waiter_until_us
         INTO @lh_seen, @lh_prev, @lh_tok, @lh_w, @lh_wn, @lh_wt, @lh_wu FROM ${T.leases} WHERE name = ? FOR UPDATE`,
      // Two statements: MariaDB evaluates every value of one SET before it assigns any.
      `SET @lh_now = ${NOW_US}`,
      `SET @lh_hand = COALESCE(@lh_prev IS NOT NULL AND @lh_w <> @lh_prev AND @lh_wu > @lh_now, 0),
           @lh_wd = COALESCE(@lh_prev IS NULL AND @lh_w = ? AND FIND_IN_SET(@lh_wn, ?) > 0, 0)`,
      `SELECT GREATEST(last, floor, @lh_tok) + 1 INTO @lh_k FROM ${T.tokens} WHERE id = 1 AND @lh_hand FOR UPDATE`,
      `SET @lh_k = IF(@lh_hand, GREATEST(COALESCE(@lh_k, @lh_tok + 1), @lh_now), NULL)`,
      `INSERT INTO ${T.tokens} (id, last) SELECT 1, @lh_k FROM DUAL WHERE @lh_hand ON DUPLICATE KEY UPDATE last = GREATEST(last, VALUES(last))`,
      // Ended (or handed over) when ours; the registration cleared either way. MySQL assigns SET
      // clauses left to right, but every value here comes from a variable, never a column just set.
      `UPDATE ${T.leases} SET
         holder = IF(@lh_prev IS NULL, holder, IF(@lh_hand, @lh_w, NULL)),
         nonce = IF(@lh_prev IS NULL, nonce, IF(@lh_hand, @lh_wn, NULL)),
         token = IF(@lh_hand, @lh_k, token),
         expires_at_us = IF(@lh_prev IS NULL, expires_at_us, IF(@lh_hand, @lh_now + @lh_wt, @lh_now)),
         term_started_at_us = IF(@lh_hand, @lh_now, term_started_at_us),
         renewed_at_us = IF(@lh_hand, @lh_now, renewed_at_us),
         ended_by = IF(@lh_prev IS NULL, ended_by, IF(@lh_hand, NULL, ?)),
         waiter = NULL, waiter_nonce = NULL, waiter_ttl_us = NULL, waiter_until_us = NULL
       WHERE name = ? AND (@lh_prev IS NOT NULL OR @lh_wd)`,
      `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at_us, detail)
         SELECT ?, ?, NULL, @lh_prev, @lh_tok, @lh_now, ? FROM DUAL WHERE @lh_prev IS NOT NULL
         UNION ALL SELECT ?, 'acquired', @lh_w, NULL, @lh_k, @lh_now, 'handed over by the release' FROM DUAL WHERE @lh_hand`,
    ],
    values: [by.holder, expect, name, by.holder, expect, event, name, name, event, detail, name],
  };
}

/**
 * One transaction that releases every request, in the order given (the caller sorts by name:
 * rows are locked in that order). Its last result is one row whose `out` holds a '1' (ended)
 * or '0' (not the caller's term, or no such lease) per request, in that order: a string, so a
 * batch of 2,000 answers in one value rather than 2,000 columns.
 */
export function planReleaseMany(requests: readonly ReleaseRequest[]): { sql: string; values: unknown[] } {
  const sql: string[] = ['START TRANSACTION', "SET @lh_out = ''"];
  const values: unknown[] = [];
  for (const req of requests) {
    const one = endTermStatements(req.name, 'released', null, req);
    sql.push(...one.sql, "SET @lh_out = CONCAT(@lh_out, IF(@lh_prev IS NULL, '0', '1'))");
    values.push(...one.values);
  }
  sql.push('COMMIT', 'SELECT @lh_out AS `out`');
  return { sql: sql.join(';\n'), values };
}
