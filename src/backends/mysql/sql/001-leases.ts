/**
 * Migration 1: leases, their history, the token counter, and the fence table.
 *
 * Times are whole microseconds since the epoch by the server's clock (UTC_TIMESTAMP(6), which
 * no session time zone moves), so no DATETIME conversion can shift an expiry. Names, holders
 * and nonces compare byte for byte (`_bin` collations): lease "Billing" is not lease "billing".
 *
 * Frozen: this is the SQL that databases at this version ran. A change to the schema is a new,
 * numbered migration.
 */
export const migration001: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS leasehold_leases (
    name               VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    holder             VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    nonce              VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    -- The last token issued for this name; rows are never deleted, so tokens never repeat.
    token              BIGINT NOT NULL DEFAULT 0,
    expires_at_us      BIGINT NULL,
    term_started_at_us BIGINT NULL,
    renewed_at_us      BIGINT NULL,
    ended_by           VARCHAR(16) CHARACTER SET ascii NULL,
    -- Same-database fenced writes (leasehold/fence with term): the term that last wrote.
    fence_token        BIGINT NULL,
    fence_nonce        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    PRIMARY KEY (name)
  ) ENGINE = InnoDB`,
  // One row: the operator's floor (migrate --min-token) and the last token issued for any name.
  // Tokens come from here as well as from each name's row, so emptying the leases table (a
  // TRUNCATE, a restore of that table alone) cannot bring an old token back.
  `CREATE TABLE IF NOT EXISTS leasehold_tokens (
    id    TINYINT NOT NULL,
    floor BIGINT NOT NULL DEFAULT 0,
    last  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (id)
  ) ENGINE = InnoDB`,
  `INSERT IGNORE INTO leasehold_tokens (id) VALUES (1)`,
  `CREATE TABLE IF NOT EXISTS leasehold_history (
    id              BIGINT NOT NULL AUTO_INCREMENT,
    name            VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    event           VARCHAR(16) CHARACTER SET ascii NOT NULL,
    holder          VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    previous_holder VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    token           BIGINT NOT NULL,
    at_us           BIGINT NOT NULL,
    detail          TEXT NULL,
    PRIMARY KEY (id),
    KEY leasehold_history_name_id (name, id)
  ) ENGINE = InnoDB`,
  `CREATE TABLE IF NOT EXISTS leasehold_fences (
    resource      VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    token         BIGINT NOT NULL,
    updated_at_us BIGINT NOT NULL,
    PRIMARY KEY (resource)
  ) ENGINE = InnoDB`,
];
