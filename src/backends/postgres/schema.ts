import { ConfigError } from '../../core/errors.js';
import { slotsMigration } from './slots-schema.js';
import { fleetMigration } from './fleet-schema.js';
import { timelineTokensMigration } from './timeline-tokens.js';
import { handoverMigration } from './handover.js';

/** Bump when a migration is appended. `leasehold doctor` compares this to the store's. */
export const SCHEMA_VERSION = 6;

const CHANNEL_PREFIX = 'leasehold_freed_';

/**
 * At most 47 characters: the schema's NOTIFY channel (channelFor) is a name too, and PostgreSQL
 * names are at most 63 bytes. pg_notify refuses a longer channel ("channel name too long"), so a
 * 48-63 character schema migrated fine and then failed every release and revoke; and LISTEN
 * would cut it to 63 bytes, where two long schemas could share one channel.
 * @throws {ConfigError}
 */
export function validateSchemaName(schema: string): string {
  const max = 63 - CHANNEL_PREFIX.length;
  if (!new RegExp(`^[A-Za-z_][A-Za-z0-9_]{0,${max - 1}}$`).test(schema)) {
    throw new ConfigError(
      `schema name ${JSON.stringify(schema)} is not a plain identifier leasehold can use: letters, digits and _ (not starting with a digit), ` +
        `at most ${max} characters, so that its NOTIFY channel "${CHANNEL_PREFIX}<schema>" fits PostgreSQL's 63-byte names`,
    );
  }
  return schema;
}

/** The NOTIFY channel on which releases and revocations are announced. */
export function channelFor(schema: string): string {
  return `${CHANNEL_PREFIX}${schema}`;
}

/**
 * Migrations, in order; index i brings the schema from version i to i+1. Each is run inside
 * one transaction holding an advisory lock, so concurrent `migrate` calls queue instead of
 * racing (the one place advisory locks fit: a short job inside a single connection).
 */
export function migrations(schema: string): string[] {
  const s = `"${validateSchemaName(schema)}"`;
  const channel = channelFor(schema);
  const all = [
    `
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
`,
    `
-- Same-database fenced writes (src/fence with \`term\`, see ./term-fence.ts): the token of the
-- term that last committed one, and the fence nonce it set. Apart from \`nonce\` so that a
-- fenced write never races this process's own renewal's compare-and-swap.
ALTER TABLE ${s}.leases ADD COLUMN fence_token bigint, ADD COLUMN fence_nonce text;
`,
    slotsMigration(s),
    // The fleet registry (src/fleet): agents, ownership, the generation counter.
    fleetMigration(s),
  ];
  // Tokens above every earlier timeline's after a promotion: ./timeline-tokens.ts.
  all.push(timelineTokensMigration(s, all[0]!));
  // One-write handover: waiter registration and the claim function that confirms by a read (./handover.ts).
  all.push(handoverMigration(s, channel));
  return all;
}
