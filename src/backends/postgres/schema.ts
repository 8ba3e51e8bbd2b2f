import { ConfigError } from '../../core/errors.js';
import { migration001 } from './sql/001-leases.js';
import { migration002 } from './sql/002-fence-columns.js';
import { migration003 } from './sql/003-slots.js';
import { migration004 } from './sql/004-fleet.js';
import { migration005 } from './sql/005-timeline-tokens.js';
import { migration006 } from './sql/006-handover.js';
import { migration007 } from './sql/007-release-many.js';
import { migration008 } from './sql/008-placement-index.js';
import { migration009 } from './sql/009-fence-lease.js';
import { migration010 } from './sql/010-schedules.js';
import { migration011 } from './sql/011-session-liveness.js';
import { migration012 } from './sql/012-renew.js';
import { migration013 } from './sql/013-release-many-set.js';
import { migration014 } from './sql/014-session-tie.js';
import { migration015 } from './sql/015-session-lock-free.js';
import { migration016 } from './sql/016-fence-rotate.js';
import { migration017 } from './sql/017-handover-acceptance.js';
import { migration018 } from './sql/018-leases-fillfactor.js';
import { migration019 } from './sql/019-handover-one-lease.js';
import { migration020 } from './sql/020-claim-one.js';
import { migration021 } from './sql/021-fence-advance.js';

/** Bump when a migration is appended. `leasehold doctor` compares this to the store's. */
export const SCHEMA_VERSION = 21;

const CHANNEL_PREFIX = 'leasehold_freed_';

const MAX_SCHEMA = 63 - CHANNEL_PREFIX.length;
/** Built once: every fenced write with `term` checks its schema name (a RegExp built per call cost more than the check). */
const SCHEMA_NAME = new RegExp(`^[A-Za-z_][A-Za-z0-9_]{0,${MAX_SCHEMA - 1}}$`);

/**
 * At most 47 characters: the schema's NOTIFY channel (channelFor) is a name too, and PostgreSQL
 * names are at most 63 bytes. pg_notify refuses a longer channel ("channel name too long"), so a
 * 48-63 character schema migrated fine and then failed every release and revoke; and LISTEN
 * would cut it to 63 bytes, where two long schemas could share one channel.
 * @throws {ConfigError}
 */
export function validateSchemaName(schema: string): string {
  const max = MAX_SCHEMA;
  if (!SCHEMA_NAME.test(schema)) {
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
  return [migration001(s, channel), migration002(s), migration003(s), migration004(s), migration005(s), migration006(s, channel), migration007(s, channel), migration008(s), migration009(s), migration010(s), migration011(s), migration012(s), migration013(s, channel), migration014(s), migration015(s), migration016(s), migration017(s, channel), migration018(s), migration019(s, channel), migration020(s), migration021(s)];
}
