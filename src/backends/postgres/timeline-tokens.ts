/**
 * Migration 3: tokens that never repeat across an asynchronous failover.
 *
 * A standby promoted after the primary died has not seen the primary's last commits, so its
 * `leases.token` counters are behind: counting on from them reissued tokens the old primary had
 * already handed out (to other holders, and fenced resources had accepted them). What a promoted
 * standby does know is that it is on a new timeline: PostgreSQL increments the timeline id at
 * every promotion, and every WAL segment name carries it. So a term's token is at least
 * `(timeline - 1) * 2^40 + 1`: on the timeline a cluster starts on (1) nothing changes; after a
 * promotion every new token is above every token the previous timelines can have issued, as long
 * as they stayed under 2^40 (a token floor set with `migrate --min-token` at or above 2^40 gives up
 * this margin: after a promotion, raise the floor again above the old primary's last token). 2^40 per timeline and up to 2^23
 * timelines stay inside a bigint.
 *
 * The timeline is read from the current WAL insert position's segment name, which is the
 * timeline in effect right after a promotion (pg_control_checkpoint() lags it until the next
 * checkpoint) and needs no privilege. Only the claim function writes tokens, and it runs on a
 * primary, where pg_current_wal_lsn() answers.
 */

/** Tokens per timeline: the token floor of timeline t is (t - 1) * 2^40. */
const TIMELINE_TOKEN_SHIFT = 40n;

const TOKEN_LINE = "token = CASE WHEN c.outcome = 'acquired' THEN l.token + 1 ELSE l.token END,";
const DECLARE_LINE = 'v_now timestamptz := now();';

/**
 * The claim function of `firstMigration`, replaced (CREATE OR REPLACE) with one whose new tokens
 * respect the timeline floor. Derived from the original text so the two cannot drift apart.
 * @param s the quoted schema name
 */
export function timelineTokensMigration(s: string, firstMigration: string): string {
  const start = firstMigration.indexOf(`CREATE FUNCTION ${s}.claim(`);
  const end = firstMigration.indexOf('$fn$;', start);
  if (start < 0 || end < 0) throw new Error('leasehold bug: the claim function was not found in migration 1');
  const claim = firstMigration.slice(start, end + '$fn$;'.length);
  if (!claim.includes(TOKEN_LINE) || !claim.includes(DECLARE_LINE)) throw new Error('leasehold bug: the claim function changed shape');
  const replaced = claim
    .replace(`CREATE FUNCTION ${s}.claim(`, `CREATE OR REPLACE FUNCTION ${s}.claim(`)
    .replace(DECLARE_LINE, `${DECLARE_LINE}\n  v_floor bigint := ${s}.timeline_token_floor();`)
    .replace(TOKEN_LINE, "token = CASE WHEN c.outcome = 'acquired' THEN GREATEST(l.token + 1, v_floor + 1) ELSE l.token END,");
  return `
-- The lowest token this timeline may issue, less one: (timeline - 1) * 2^40.
CREATE OR REPLACE FUNCTION ${s}.timeline_token_floor() RETURNS bigint LANGUAGE sql VOLATILE AS $fn$
  SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << ${TIMELINE_TOKEN_SHIFT.toString()}
$fn$;
${replaced}
`;
}
