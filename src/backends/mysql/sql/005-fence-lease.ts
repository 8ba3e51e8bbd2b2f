/**
 * Migration 5: a resource's high-water mark belongs to one lease (issue 26, item 2). Tokens of
 * two lease names are not comparable, so the mark records the lease name of the first fenced
 * write that names one (the `term`'s lease, or the `lease` option); a write under another name
 * is refused with FenceOwnedError, naming both. NULL is an unclaimed mark: every row written
 * before this migration, and every row written only by fences that name no lease.
 *
 * MySQL 8 has no ADD COLUMN IF NOT EXISTS (MariaDB has), and a migration here must be safe to
 * rerun after it was cut short (../schema.ts): the column is added only if information_schema
 * does not list it yet, through a prepared statement, which both servers run.
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration.
 */
export const migration005: readonly string[] = [
  `SET @leasehold_m5 = IF(
     (SELECT COUNT(*) FROM information_schema.columns
       WHERE table_schema = DATABASE() AND table_name = 'leasehold_fences' AND column_name = 'lease') = 0,
     'ALTER TABLE leasehold_fences ADD COLUMN lease VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL',
     'DO 0');
   PREPARE leasehold_m5 FROM @leasehold_m5;
   EXECUTE leasehold_m5;
   DEALLOCATE PREPARE leasehold_m5`,
];
