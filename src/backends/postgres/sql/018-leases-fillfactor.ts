/**
 * Migration 18 (issue 34): room on each page of `leases` for its renewals.
 *
 * A renewal rewrites every row it renews (nonce, expires_at, renewed_at), none of them in an
 * index, so PostgreSQL can keep the new version on the same page and skip the primary key (a HOT
 * update) - if the page has room. At the default fillfactor of 100 it had none: at 10,000
 * leases renewed every tick, 2% of updates were HOT, every other one wrote a new index entry
 * too, and the table grew to 8x its live size between vacuums. With half of each page left free
 * (measured on a server of its own, pg_stat_statements, interleaved with fillfactor 100 and 70):
 * 98% HOT, the renew function's server time per 10,000-lease tick 118 -> 82 ms, its WAL records
 * 39,741 -> 20,278 per tick, and the table 28.8 -> 2.3 MB. 70 gave 94% and 3.5 MB. A leases
 * table is small (one row per lease name), so the space is cheap.
 *
 * The setting applies to pages written from now on: an existing table gains it as its rows move
 * (each non-HOT update puts a row on a page with room) or at once with VACUUM FULL, which this
 * migration does not run (it would lock the table against every claim while it copies it).
 *
 * Frozen once merged: this is the SQL that databases at this version ran;
 * src/backends/postgres/schema.sql shows the result.
 * @param s the quoted schema name
 */
export function migration018(s: string): string {
  return `ALTER TABLE ${s}.leases SET (fillfactor = 50);`;
}
