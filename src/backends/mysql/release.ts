/**
 * Ending terms: a release by the holder, many releases in one round trip (releaseMany), and an
 * operator's revocation. A holder's release is one procedure call (sql/009-release-procedure.ts)
 * wherever it is sent from, so the batch cannot drift from the single release.
 */
import type { ReleaseRequest } from '../../core/port.js';
import { NOW_US, T } from './schema.js';

/**
 * An operator's revocation of one term inside the caller's transaction: lock the row, end the
 * term of any live holder, record it. Leaves `@lh_seen` (the row's token, NULL when the row does
 * not exist) and `@lh_prev` (the holder whose term ended, NULL when nothing ended), as a
 * holder's release ({@link releaseCall}) does. A revocation hands nothing over and leaves a
 * registered waiter in place (it re-checks on its own).
 */
export function revokeStatements(name: string, detail: string): { sql: string[]; values: unknown[] } {
  return {
    sql: [
      'SET @lh_prev = NULL, @lh_tok = NULL, @lh_seen = NULL',
      `SELECT token, holder, token INTO @lh_seen, @lh_prev, @lh_tok FROM ${T.leases} WHERE name = ? FOR UPDATE`,
      `SET @lh_now = ${NOW_US}`,
      `UPDATE ${T.leases} SET holder = NULL, nonce = NULL, expires_at_us = @lh_now, ended_by = 'revoked' WHERE name = ? AND @lh_prev IS NOT NULL`,
      `INSERT INTO ${T.history} (name, event, holder, previous_holder, token, at_us, detail)
         SELECT ?, 'revoked', NULL, @lh_prev, @lh_tok, @lh_now, ? FROM DUAL WHERE @lh_prev IS NOT NULL`,
    ],
    values: [name, name, name, detail],
  };
}

/**
 * A holder's release of one term inside the caller's transaction: one call of the
 * `leasehold_release` procedure (sql/009-release-procedure.ts), which ends the term if the row
 * still holds the caller's holder id and one of its nonces, or hands it to the registered
 * waiter (sql/006-handover.ts); a caller that is not the holder but the registered waiter (the
 * nonce it registered under) withdraws. It leaves `@lh_prev` and `@lh_seen` as
 * {@link revokeStatements} does. The single release, its fallback on the pool and releaseMany
 * all end a row with this call, so they cannot drift apart.
 */
export function releaseCall(req: ReleaseRequest): { sql: string; values: unknown[] } {
  return { sql: 'CALL leasehold_release(?, ?, ?)', values: [req.name, req.holder, req.expect.join(',')] };
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
    const one = releaseCall(req);
    sql.push(one.sql, "SET @lh_out = CONCAT(@lh_out, IF(@lh_prev IS NULL, '0', '1'))");
    values.push(...one.values);
  }
  sql.push('COMMIT', 'SELECT @lh_out AS `out`');
  return { sql: sql.join(';\n'), values };
}
