/**
 * The lease-row half of a same-database fenced write (src/fence/postgres.ts with `term`).
 *
 * Why two clones of one term cannot both commit: the last statement of every such transaction
 * is the UPDATE below, which sets the row's fence nonce to fresh randomness only if the row
 * still holds a fence nonce the writing process set itself. The UPDATE takes the lease row's
 * lock, so two transactions serialise on it: the second waits for the first to commit, then
 * re-reads the row (READ COMMITTED) and finds a nonce it never issued, so it changes nothing
 * and is rolled back with all of the user's writes. (Under REPEATABLE READ or SERIALIZABLE it
 * fails with a serialization error instead: also no commit.)
 */
import { judge, type TermFenceFailure, type TermFenceRequest } from '../term-fence.js';
import { validateSchemaName } from './schema.js';
import type { PgQueryableLike, PgResultLike } from './store.js';

const CONFLICT_DETAIL = 'two processes wrote with one term (a restored snapshot or a clone), seen by a fenced write';

/**
 * Inside the caller's transaction, as its last step: the UPDATE that moves the row's fence nonce
 * to `next` only if the row is ours, then COMMIT, in one round trip, as one simple query
 * (which carries no parameters, so the values go in as literals). When the row is not ours the
 * UPDATE changes nothing and the statement divides by its zero row count: the error aborts the
 * transaction, the server skips the COMMIT, and nothing is committed. True: committed. False:
 * not ours, the transaction is still open and aborted (ROLLBACK it, then classifyFenceFailure).
 * Any other error leaves the outcome of the COMMIT unknown to the caller, as a failed COMMIT does.
 *
 * `cached`: the schema has migration 16's `fence_rotate` (fenceFunctions), the same UPDATE in a
 * PL/pgSQL function whose plan the connection keeps; a simple query's statement is planned on
 * every write, which was more than half of its server time.
 */
export async function rotateFenceNonceAndCommit(tx: PgQueryableLike, schema: string, req: TermFenceRequest & { next: string }, cached = false): Promise<boolean> {
  const s = `"${validateSchemaName(schema)}"`;
  const token = req.token.toString();
  const expect = req.expect.length === 0 ? "'{}'::text[]" : `ARRAY[${req.expect.map(sqlLiteral).join(', ')}]::text[]`;
  const check = cached
    ? `SELECT 1 / ${s}.fence_rotate(${sqlLiteral(req.name)}, ${sqlLiteral(req.holder)}, ${token}, ${sqlLiteral(req.next)}, ${expect}, ${req.first ? 'true' : 'false'})::int AS ours`
    : `WITH u AS (
         UPDATE ${s}.leases SET fence_token = ${token}, fence_nonce = ${sqlLiteral(req.next)}
          WHERE name = ${sqlLiteral(req.name)} AND holder = ${sqlLiteral(req.holder)} AND token = ${token} AND expires_at > now()
            AND CASE WHEN fence_token IS NULL OR fence_token < ${token} THEN ${req.first ? 'true' : 'false'}
                     ELSE coalesce(fence_nonce = ANY (${expect}), false) END
         RETURNING 1)
       SELECT 1 / (SELECT count(*)::int FROM u) AS ours`;
  try {
    await tx.query(`${check};\n       COMMIT`);
    return true;
  } catch (err) {
    if ((err as { code?: unknown }).code === DIVISION_BY_ZERO) return false;
    throw err;
  }
}

/** Which of the fence's functions a schema has (migrations 16 and 21); a schema does not lose one. */
export interface FenceFunctions {
  /** `fence_rotate`: the lease-row check and nonce swap, planned once per connection. */
  rotate: boolean;
  /** `fence_advance`: the mark's advance on the store's own fences table, a lock when the mark already holds the token. */
  advance: boolean;
}

const functionsOf = new WeakMap<object, Promise<FenceFunctions>>();
const NONE: FenceFunctions = { rotate: false, advance: false };

/**
 * Which of the fence's functions the lease store's schema has, asked once per store (one round
 * trip, before the store's first fenced write). A statement inside the fenced transaction
 * cannot fall back when a function is missing: the error would abort the user's writes. So a
 * schema before version 16 or 21 (a process upgraded before `leasehold migrate`) gets the
 * statements its version's clients send, and so does a store whose answer did not come (asked
 * again next time). Found by name, not by version number, so it holds whichever number each
 * migration has.
 */
export function fenceFunctions(store: object, schema: string, query: (text: string, values: unknown[]) => Promise<PgResultLike>): Promise<FenceFunctions> {
  let known = functionsOf.get(store);
  if (known === undefined) {
    const s = `"${validateSchemaName(schema)}"`;
    known = query('SELECT to_regprocedure($1) IS NOT NULL AS rotate, to_regprocedure($2) IS NOT NULL AS advance', [
      `${s}.fence_rotate(text,text,bigint,text,text[],boolean)`,
      `${s}.fence_advance(text,bigint,text)`,
    ]).then(
      (r) => ({ rotate: r.rows[0]?.['rotate'] === true, advance: r.rows[0]?.['advance'] === true }),
      () => {
        functionsOf.delete(store);
        return NONE;
      },
    );
    functionsOf.set(store, known);
  }
  return known;
}

const DIVISION_BY_ZERO = '22012';

/** A string as an escape-string literal: right whatever standard_conforming_strings says. */
export function sqlLiteral(v: string): string {
  return `E'${v.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}

/**
 * After the rollback, in a statement of its own: why the row was not ours. A live term of this
 * holder and token whose fence nonce this process never set is the clone rule (store contract
 * 4b): the term is ended on the spot with a 'conflict' history event, so neither clone keeps it.
 */
export async function classifyFenceFailure(db: PgQueryableLike, schema: string, req: TermFenceRequest): Promise<TermFenceFailure> {
  const s = `"${validateSchemaName(schema)}"`;
  const r = await db.query(
    `WITH cur AS (
       SELECT name, holder, token, ended_by, expires_at > now() AS live,
              CASE WHEN fence_token IS NULL OR fence_token < token THEN $5::boolean
                   ELSE coalesce(fence_nonce = ANY ($4::text[]), false) END AS ours
         FROM ${s}.leases WHERE name = $1 FOR UPDATE),
     ended AS (
       UPDATE ${s}.leases l SET holder = NULL, nonce = NULL, expires_at = now(), ended_by = 'conflict'
         FROM cur WHERE l.name = cur.name AND cur.holder = $2 AND cur.token = $3 AND cur.live AND NOT cur.ours
       RETURNING l.name, l.token),
     hist AS (
       INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
       SELECT name, 'conflict', NULL, $2, token, now(), $6 FROM ended)
     SELECT cur.holder, cur.token, cur.ended_by, cur.live, cur.ours, EXISTS (SELECT 1 FROM ended) AS conflict FROM cur`,
    [req.name, req.holder, req.token.toString(), [...req.expect], req.first, CONFLICT_DETAIL],
  );
  const row = r.rows[0];
  if (row === undefined) return { kind: 'missing' };
  return judge(
    {
      holder: (row['holder'] as string | null) ?? null,
      token: BigInt(row['token'] as string),
      endedBy: (row['ended_by'] as string | null) ?? null,
      live: row['live'] === true,
      ours: row['ours'] === true,
      conflict: row['conflict'] === true,
    },
    req,
  );
}
