/**
 * Migration 9: a resource's high-water mark belongs to one lease (issue 26, item 2). Tokens of
 * two lease names are not comparable: lease "a" at token 3 and lease "b" at token 1 are both
 * current, yet a shared mark would call "b"'s only holder stale ("a newer leader exists"). The
 * mark records the lease name of the first fenced write that names one (the `term`'s lease, or
 * the `lease` option); a write under another name is refused with FenceOwnedError, naming both.
 * NULL is an unclaimed mark: every row written before this migration, and every row written by a
 * fence that names no lease (`token` alone). The first fenced write that names a lease claims it.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration; src/backends/postgres/schema.sql (test/stores/schema-dump.test.ts) shows the result.
 */
/** @param s the quoted schema name */
export function migration009(s: string): string {
  return `
ALTER TABLE ${s}.fences ADD COLUMN lease text;
`;
}
