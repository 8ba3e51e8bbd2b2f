/**
 * The lease-row half of a same-database fenced write on SQLite (src/fence/sqlite.ts with
 * `term`). The same rule as ../postgres/term-fence.ts (shared in ../term-fence.ts): the write's last statement sets the
 * row's fence nonce to fresh randomness only if it holds one the writing process set. SQLite
 * has one writer at a time (BEGIN IMMEDIATE), so of two clones' transactions the second runs
 * after the first committed, finds a nonce it never issued, and is rolled back.
 */
import { judge, type TermFenceFailure, type TermFenceRequest } from '../term-fence.js';
import { immediate, type SqliteDatabaseLike } from './store.js';

// The store's table names (./store.ts).
const LEASES = 'leasehold_leases';
const HISTORY = 'leasehold_history';

const OURS = `CASE WHEN fence_token IS NULL OR fence_token < token THEN @first ELSE coalesce(fence_nonce IN (SELECT value FROM json_each(@expect)), 0) END`;

/** Inside the caller's transaction. True when the row was ours and now holds `next`. */
export function rotateFenceNonceSync(db: SqliteDatabaseLike, req: TermFenceRequest & { next: string }): boolean {
  return (
    db
      .prepare(
        `UPDATE ${LEASES} SET fence_token = @token, fence_nonce = @next
          WHERE name = @name AND holder = @holder AND token = @token AND expires_at > @now AND ${OURS}`,
      )
      .run({ name: req.name, holder: req.holder, token: req.token, next: req.next, now: Date.now(), first: req.first ? 1 : 0, expect: JSON.stringify(req.expect) })
      .changes === 1
  );
}

/** After the rollback, in a transaction of its own: why the row was not ours (and the clone rule, as on PostgreSQL). */
export function classifyFenceFailureSync(db: SqliteDatabaseLike, req: TermFenceRequest): TermFenceFailure {
  return immediate(db, () => {
    const now = Date.now();
    const row = db
      .prepare(`SELECT holder, token, ended_by, expires_at > @now AS live, ${OURS} AS ours FROM ${LEASES} WHERE name = @name`)
      .safeIntegers(true)
      .get({ name: req.name, now, first: req.first ? 1 : 0, expect: JSON.stringify(req.expect) }) as
      | { holder: string | null; token: bigint; ended_by: string | null; live: bigint | null; ours: bigint | null }
      | undefined;
    if (row === undefined) return { kind: 'missing' };
    const live = row.live === 1n;
    const ours = row.ours === 1n;
    const conflict = row.holder === req.holder && row.token === req.token && live && !ours;
    if (conflict) {
      db.prepare(`UPDATE ${LEASES} SET holder = NULL, nonce = NULL, expires_at = ?, ended_by = 'conflict' WHERE name = ?`).run(now, req.name);
      db.prepare(`INSERT INTO ${HISTORY} (name, event, holder, previous_holder, token, at, detail) VALUES (?, 'conflict', NULL, ?, ?, ?, ?)`).run(
        req.name,
        req.holder,
        row.token,
        now,
        'two processes wrote with one term (a restored snapshot or a clone), seen by a fenced write',
      );
    }
    return judge({ holder: row.holder, token: row.token, endedBy: row.ended_by, live, ours, conflict }, req);
  });
}
