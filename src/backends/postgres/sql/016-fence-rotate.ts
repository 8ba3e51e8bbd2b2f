/**
 * Migration 16 (issue 34): the lease-row half of a same-database fenced write as a function.
 *
 * A fenced write with `term` ends with the UPDATE that swaps the lease row's fence nonce
 * (../term-fence.ts), sent with COMMIT as one simple query so that the check costs no round trip
 * of its own. A simple query carries no parameters and is parsed and planned on every write:
 * profiled with pg_stat_statements, that planning was more than half of the statement's server
 * time (plan 75 us, execute 54 us), and the whole term fence cost about twice an unfenced
 * transaction. A PL/pgSQL function keeps the plan of its UPDATE for the session, so the write
 * now sends `SELECT 1 / fence_rotate(...)::int; COMMIT`: the same one round trip, the same
 * UPDATE, planned once per connection. (A prepared statement would keep the plan too, but
 * it needs the extended protocol, and so a round trip of its own before COMMIT; a named one
 * prepared per connection also breaks behind a transaction-pooling pgbouncer.)
 *
 * The rule is the statement's, unchanged: the row moves to `p_next` only if it is this
 * holder's live term with this token and holds a fence nonce the caller set (or none yet of
 * this term, on the term's first write). The UPDATE takes the row's lock, so two clones
 * serialise on it and the second re-reads the row the first committed (READ COMMITTED) and
 * changes nothing. True when the row moved. The caller divides by it, so a row that is not
 * ours aborts the transaction before its COMMIT.
 *
 * Frozen once merged: this is the SQL that databases at this version ran;
 * src/backends/postgres/schema.sql shows the result.
 * @param s the quoted schema name
 */
export function migration016(s: string): string {
  return `
CREATE FUNCTION ${s}.fence_rotate(p_name text, p_holder text, p_token bigint, p_next text, p_expect text[], p_first boolean)
RETURNS boolean
LANGUAGE plpgsql
AS $fn$
BEGIN
  UPDATE ${s}.leases AS l SET fence_token = p_token, fence_nonce = p_next
   WHERE l.name = p_name AND l.holder = p_holder AND l.token = p_token AND l.expires_at > now()
     AND CASE WHEN l.fence_token IS NULL OR l.fence_token < p_token THEN p_first
              ELSE coalesce(l.fence_nonce = ANY (p_expect), false) END;
  RETURN FOUND;
END
$fn$;
`;
}
