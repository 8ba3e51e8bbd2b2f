/**
 * Migration 2: the columns of same-database fenced writes (src/fence with `term`, ../term-fence.ts).
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name */
export function migration002(s: string): string {
  return `
-- Same-database fenced writes (src/fence with \`term\`, see ./term-fence.ts): the token of the
-- term that last committed one, and the fence nonce it set. Apart from \`nonce\` so that a
-- fenced write never races this process's own renewal's compare-and-swap.
ALTER TABLE ${s}.leases ADD COLUMN fence_token bigint, ADD COLUMN fence_nonce text;
`;
}
