import { EXIT, logFormatOption, openStoreFromFlags, out, setLogContext, toJson, usageError } from './common.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

export const MIGRATE_SPEC = defineCommand({
  name: 'migrate',
  summary: 'Create or upgrade the schema (PostgreSQL needs it; SQLite does it on open); --min-token sets a token floor.',
  about: `Creates or upgrades leasehold's tables. Idempotent and safe to run from many processes at once
(PostgreSQL takes an advisory lock for it). PostgreSQL needs it once per schema before any
lease is taken; the SQLite store migrates itself on open.`,
  flags: {
    ...STORE_FLAGS,
    'min-token': {
      type: 'string',
      value: 'N',
      help:
        'a token floor: every token issued from now on, for any lease name, is larger than N. For a store that lost its history ' +
        '(a wiped etcd, a Redis restored from an old dump) while fenced resources kept their high-water marks: use the highest ' +
        'mark (leasehold doctor --fence-high-water). Never lowers a floor or a token; live terms at or below N are ended (Redis ' +
        'keeps them: its tokens are time-based)',
    },
    json: { type: 'boolean', help: 'print what was done as one JSON object: { store, kind, schema, tokenFloor }' },
    ...LOG_FLAGS,
  },
  footer: 'Exit 0 when the schema is current (and the floor set); 2 usage; 3 store unreachable.',
});

export const MIGRATE_USAGE = helpText(MIGRATE_SPEC);

/** A decimal token, as typed by an operator: digits only, no sign, no exponent. */
function parseMinToken(raw: string): bigint {
  if (!/^\d{1,20}$/.test(raw.trim())) {
    throw usageError(`--min-token must be a whole number of at most 20 digits (a fencing token, for example 5000), got ${JSON.stringify(raw)}`);
  }
  return BigInt(raw.trim());
}

export async function migrateCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(MIGRATE_SPEC, argv);
  if (values.help === true) {
    out(MIGRATE_USAGE);
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals.length > 0) throw usageError(`migrate takes no arguments, got ${JSON.stringify(positionals[0])}; use --store URL`);
  // Checked before the store is opened: a typo must not half-run a migration.
  const minToken = values['min-token'] === undefined ? undefined : parseMinToken(values['min-token']);
  const { store } = await openStoreFromFlags(values);
  try {
    const before = await store.schemaStatus();
    const after = await store.migrate(minToken === undefined ? {} : { minToken });
    const floor = after.tokenFloor;
    if (values.json === true) {
      out(
        toJson({
          store: store.description,
          kind: store.kind,
          schema: { before: before.current, after: after.current, expected: after.expected, migrated: before.current !== after.current },
          tokenFloor: floor === undefined ? null : { requested: minToken, floor: floor.floor, raised: floor.raised, endedTerms: floor.endedTerms },
        }),
      );
      return EXIT.OK;
    }
    out(
      before.current === after.current
        ? `${store.description}: schema already at version ${after.current}`
        : `${store.description}: schema migrated from version ${before.current} to ${after.current}`,
    );
    if (floor !== undefined) {
      out(
        floor.raised
          ? `${store.description}: token floor raised to ${floor.floor}: every later token is larger` +
              (floor.endedTerms > 0 ? `; ${floor.endedTerms} live term${floor.endedTerms === 1 ? '' : 's'} below it ended` : '')
          : `${store.description}: token floor already at ${floor.floor} (>= ${minToken}); nothing lowered`,
      );
    }
    return EXIT.OK;
  } finally {
    await store.close();
  }
}
