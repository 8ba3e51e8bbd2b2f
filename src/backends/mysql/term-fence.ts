/**
 * The lease-row half of a same-database fenced write on MySQL/MariaDB (./fence.ts with `term`),
 * the rule of ../term-fence.ts in InnoDB's terms.
 *
 * Why two clones of one term cannot both commit: the last statement before COMMIT is the UPDATE
 * below, which sets the row's fence nonce to fresh randomness only if the row still holds a nonce
 * the writing process set. An UPDATE is a locking ("current") read in InnoDB under every
 * isolation level, REPEATABLE READ included: the second clone's UPDATE waits for the first's
 * COMMIT, then evaluates its WHERE on the committed row, finds a nonce it never issued, changes
 * nothing, and its transaction is rolled back with all of the user's writes.
 *
 * The lease tables are named with the store's database, so the check reaches the lease row from
 * whichever database the user's connection has selected (one server, one transaction).
 */
import { judge, type TermFenceFailure, type TermFenceRequest } from '../term-fence.js';
import { NOW_US, T } from './schema.js';

/** One statement on the transaction's connection (mysql2's callback API). */
export type Exec = (sql: string, values?: unknown[]) => Promise<unknown>;

const CONFLICT_DETAIL = 'two processes wrote with one term (a restored snapshot or a clone), seen by a fenced write';

export function qualified(database: string, table: string): string {
  return `\`${database.replace(/`/g, '``')}\`.\`${table}\``;
}

/** The row's fence columns are this process's: the same CASE in both statements below. */
function oursSql(tokenColumn: string, first: boolean): string {
  return `CASE WHEN fence_token IS NULL OR fence_token < ${tokenColumn} THEN ${first ? 1 : 0}
               ELSE COALESCE(FIND_IN_SET(fence_nonce, ?) > 0, 0) END`;
}

/**
 * Inside the caller's transaction, before its COMMIT: moves the row's fence nonce to `next` if
 * the row is ours. True: it was (the caller commits). False: not ours, nothing changed (the
 * caller rolls back, then classifyFenceFailure). Tokens go in as digits: a BIGINT compared with
 * a string parameter is compared as a double, which is inexact above 2^53.
 */
export async function rotateFenceNonce(exec: Exec, database: string, req: TermFenceRequest & { next: string }): Promise<boolean> {
  const token = req.token.toString();
  const r = (await exec(
    `UPDATE ${qualified(database, T.leases)} SET fence_token = ${token}, fence_nonce = ?
      WHERE name = ? AND holder = ? AND token = ${token} AND expires_at_us > ${NOW_US}
        AND ${oursSql(token, req.first)}`,
    [req.next, req.name, req.holder, req.expect.join(',')],
  )) as { affectedRows?: number };
  // With or without CLIENT_FOUND_ROWS the count is the same: the new nonce always changes the row.
  return r.affectedRows === 1;
}

/**
 * After the rollback, in a transaction of its own: why the row was not ours. A live term of this
 * holder and token whose fence nonce this process never set is the clone rule (store contract
 * 4b): the term is ended on the spot with a 'conflict' history event, so neither clone keeps it.
 * The decision is made here from a row locked FOR UPDATE, so it cannot change before the UPDATE.
 */
export async function classifyFenceFailure(exec: Exec, database: string, req: TermFenceRequest): Promise<TermFenceFailure> {
  const leases = qualified(database, T.leases);
  await exec('START TRANSACTION');
  try {
    const rows = (await exec(
      `SELECT holder, CAST(token AS CHAR) AS token, ended_by, COALESCE(expires_at_us > ${NOW_US}, 0) AS live,
              ${oursSql('token', req.first)} AS ours, CAST(${NOW_US} AS CHAR) AS now_us
         FROM ${leases} WHERE name = ? FOR UPDATE`,
      [req.expect.join(','), req.name],
    )) as { holder: string | null; token: string; ended_by: string | null; live: number | string; ours: number | string; now_us: string }[];
    const row = rows[0];
    if (row === undefined) {
      await exec('ROLLBACK');
      return { kind: 'missing' };
    }
    const token = BigInt(row.token);
    const live = Number(row.live) === 1;
    const ours = Number(row.ours) === 1;
    const conflict = row.holder === req.holder && token === req.token && live && !ours;
    if (conflict) {
      await exec(`UPDATE ${leases} SET holder = NULL, nonce = NULL, expires_at_us = ${row.now_us}, ended_by = 'conflict' WHERE name = ?`, [req.name]);
      await exec(
        `INSERT INTO ${qualified(database, T.history)} (name, event, holder, previous_holder, token, at_us, detail)
           VALUES (?, 'conflict', NULL, ?, ${row.token}, ${row.now_us}, ?)`,
        [req.name, req.holder, CONFLICT_DETAIL],
      );
    }
    await exec('COMMIT');
    return judge({ holder: row.holder, token, endedBy: row.ended_by, live, ours, conflict }, req);
  } catch (err) {
    await exec('ROLLBACK').catch(() => {});
    throw err;
  }
}
