/**
 * Migration 1: the leases, their history and the fence tables; the claim function (acquire or
 * renew a batch in one statement, judged by now() of this database); the freed notification.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name
 * @param channel the NOTIFY channel (../schema.ts channelFor) */
export function migration001(s: string, channel: string): string {
  return `
CREATE TABLE ${s}.leases (
  name            text PRIMARY KEY,
  holder          text,
  nonce           text,
  -- The last token issued for this name. Rows are never deleted, so a released or expired
  -- lease keeps its token and the next holder's is larger.
  token           bigint NOT NULL DEFAULT 0,
  expires_at      timestamptz,
  term_started_at timestamptz,
  renewed_at      timestamptz,
  ended_by        text CHECK (ended_by IN ('released', 'revoked', 'conflict'))
);

CREATE TABLE ${s}.history (
  id              bigserial PRIMARY KEY,
  name            text NOT NULL,
  event           text NOT NULL CHECK (event IN ('acquired', 'takeover', 'released', 'revoked', 'conflict')),
  holder          text,
  previous_holder text,
  token           bigint NOT NULL,
  at              timestamptz NOT NULL,
  detail          text
);
CREATE INDEX history_name_id ON ${s}.history (name, id);

-- The resource-side fence: one high-water mark per protected resource (see src/fence).
CREATE TABLE ${s}.fences (
  resource   text PRIMARY KEY,
  token      bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Acquire-or-renew for a batch of leases in one statement, judged by now() of this database.
-- Rows are locked in name order, so two batches never deadlock.
CREATE FUNCTION ${s}.claim(
  p_names text[], p_holders text[], p_expect text[], p_next text[],
  p_ttl_ms float8[], p_contend boolean[]
) RETURNS TABLE (name text, outcome text, reason text, token bigint, holder text,
                 expires_at_ms float8, now_ms float8)
LANGUAGE plpgsql
-- Plan each call for its own batch size: a generic plan cached after a few one-lease calls
-- joins the CTEs with nested loops, which turns a 10,000-lease batch into seconds.
SET plan_cache_mode = force_custom_plan
AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
BEGIN
  INSERT INTO ${s}.leases AS l (name) SELECT DISTINCT u FROM unnest(p_names) AS u
    ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING;
  PERFORM 1 FROM ${s}.leases AS l WHERE l.name = ANY (p_names) ORDER BY l.name FOR UPDATE;
  RETURN QUERY
  WITH req AS (
    SELECT r.name, r.holder, string_to_array(r.expect, ',') AS expect, r.nxt, r.ttl_ms, r.contend, r.ord
      FROM unnest(p_names, p_holders, p_expect, p_next, p_ttl_ms, p_contend)
      WITH ORDINALITY AS r(name, holder, expect, nxt, ttl_ms, contend, ord)
  ), cur AS (
    SELECT r.*, l.holder AS cur_holder, l.nonce AS cur_nonce, l.token AS cur_token,
           l.expires_at AS cur_expires, l.ended_by AS cur_ended_by,
           CASE
             WHEN NOT r.contend THEN
               CASE WHEN l.holder = r.holder AND l.nonce = ANY (r.expect) AND l.expires_at > v_now
                    THEN 'renewed' ELSE 'lost' END
             WHEN l.holder IS NULL OR l.expires_at <= v_now THEN 'acquired'
             ELSE 'busy'
           END AS outcome
      FROM req r JOIN ${s}.leases l ON l.name = r.name
  ), upd AS (
    UPDATE ${s}.leases AS l
       SET holder = c.holder,
           nonce = c.nxt,
           token = CASE WHEN c.outcome = 'acquired' THEN l.token + 1 ELSE l.token END,
           expires_at = v_now + c.ttl_ms * interval '1 millisecond',
           term_started_at = CASE WHEN c.outcome = 'acquired' THEN v_now ELSE l.term_started_at END,
           renewed_at = v_now,
           ended_by = NULL
      FROM cur c
     WHERE l.name = c.name AND c.outcome IN ('acquired', 'renewed')
    RETURNING l.name, l.token, l.expires_at
  ), conflict AS (
    -- Our holder id with a nonce we do not hold, on a live term: two processes are renewing
    -- one term (a snapshot restored twice). Neither can be told apart from the other, so the
    -- term ends for both; the next acquisition gets a larger token and fences them both.
    UPDATE ${s}.leases AS l
       SET holder = NULL, nonce = NULL, expires_at = v_now, ended_by = 'conflict'
      FROM cur c
     WHERE l.name = c.name AND c.outcome = 'lost' AND c.cur_holder = c.holder
       AND NOT (c.cur_nonce = ANY (c.expect)) AND c.cur_expires > v_now
    RETURNING l.name, l.token
  ), hist AS (
    INSERT INTO ${s}.history (name, event, holder, previous_holder, token, at, detail)
    SELECT c.name, CASE WHEN c.cur_holder IS NULL OR c.cur_ended_by IS NOT NULL THEN 'acquired' ELSE 'takeover' END,
           c.holder, c.cur_holder, u.token, v_now, NULL
      FROM cur c JOIN upd u ON u.name = c.name
     WHERE c.outcome = 'acquired'
    UNION ALL
    SELECT x.name, 'conflict', NULL, c.holder, x.token, v_now, 'two processes renewed one term (a restored snapshot or a clone)'
      FROM conflict x JOIN cur c ON c.name = x.name
  )
  SELECT c.name, c.outcome,
         CASE WHEN c.outcome <> 'lost' THEN NULL
              WHEN c.cur_holder = c.holder AND c.cur_nonce = ANY (c.expect) THEN 'expired'
              WHEN c.cur_holder = c.holder THEN 'cloned'
              WHEN c.cur_holder IS NULL AND c.cur_ended_by = 'revoked' THEN 'revoked'
              WHEN c.cur_holder IS NULL AND c.cur_ended_by = 'released' THEN 'released'
              WHEN c.cur_holder IS NULL AND c.cur_ended_by = 'conflict' THEN 'cloned'
              WHEN c.cur_holder IS NULL THEN 'expired'
              ELSE 'superseded' END,
         COALESCE(u.token, c.cur_token),
         CASE WHEN u.name IS NOT NULL THEN c.holder ELSE c.cur_holder END,
         (extract(epoch FROM COALESCE(u.expires_at, c.cur_expires)) * 1000)::float8,
         (extract(epoch FROM v_now) * 1000)::float8
    FROM cur c LEFT JOIN upd u ON u.name = c.name
   ORDER BY c.ord;
END
$fn$;

-- Releases and revocations wake followers at once; expiry still covers a lost notification.
CREATE FUNCTION ${s}.notify_freed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_notify('${channel}', NEW.name);
  RETURN NEW;
END
$fn$;
CREATE TRIGGER leases_freed AFTER UPDATE OF holder ON ${s}.leases
  FOR EACH ROW WHEN (OLD.holder IS NOT NULL AND NEW.holder IS NULL)
  EXECUTE FUNCTION ${s}.notify_freed();
`;
}
