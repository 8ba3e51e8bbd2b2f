/**
 * The MySQL store's tables and migrations: version N of a database is the first N entries of
 * MIGRATIONS run in order, each once. MySQL commits every DDL statement on its own, so a
 * migration is a list of idempotent statements (CREATE TABLE IF NOT EXISTS, ...) and the version
 * is written after the last: a migration cut short runs again from its start.
 */
import { migration001 } from './sql/001-leases.js';
import { migration002 } from './sql/002-slots.js';
import { migration003 } from './sql/003-fleet.js';
import { migration004 } from './sql/004-placement-index.js';
import { migration005 } from './sql/005-fence-lease.js';
import { migration006 } from './sql/006-handover.js';
import { migration007 } from './sql/007-schedules.js';
import { migration008 } from './sql/008-session-liveness.js';
import { migration009 } from './sql/009-release-procedure.js';
import { migration010 } from './sql/010-handover-acceptance.js';

export const T = {
  leases: 'leasehold_leases',
  history: 'leasehold_history',
  tokens: 'leasehold_tokens',
  fences: 'leasehold_fences',
  version: 'leasehold_schema_version',
} as const;

export const MIGRATIONS: readonly (readonly string[])[] = [migration001, migration002, migration003, migration004, migration005, migration006, migration007, migration008, migration009, migration010];

/** The version a migrated database is at: every entry of MIGRATIONS has run. */
export const MYSQL_SCHEMA_VERSION = MIGRATIONS.length;

/** The current time by the server's clock, whole microseconds since the epoch (no time zone applies). */
export const NOW_US = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
