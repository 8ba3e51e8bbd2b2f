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
 */
export function endTermStatements(name: string, event: 'released' | 'revoked', detail: string | null, by: ReleaseRequest | null): { sql: string[]; values: unknown[] } {
  const who = by === null ? 'holder IS NOT NULL' : 'holder = ? AND nonce IS NOT NULL AND FIND_IN_SET(nonce, ?) > 0';
  return {
    sql: [
      'SET @lh_prev = NULL, @lh_tok = NULL, @lh_seen = NULL',
      `SELECT token INTO @lh_seen FROM ${T.leases} WHERE name = ? FOR UPDATE`,
      `SELECT holder, token INTO @lh_prev, @lh_tok FROM ${T.leases} WHERE name = ? AND ${who}`,
      `SET @lh_now = ${NOW_US}`,
      `UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at_us = @lh_now, ended_by = ? WHERE name = ? AND @lh_prev IS NOT NULL`,
      `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at_us, detail)
         SELECT ?, ?, NULL, @lh_prev, @lh_tok, @lh_now, ? FROM DUAL WHERE @lh_prev IS NOT NULL`,
    ],
    values: [name, name, ...(by === null ? [] : [by.holder, by.expect.join(',')]), event, name, name, event, detail],
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
