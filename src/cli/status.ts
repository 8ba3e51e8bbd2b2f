import { validateLeaseName } from '../core/config.js';
import { EXIT, formatMs, logFormatOption, openStoreFromFlags, out, requireCurrentSchema, setLogContext, table, toJson, usageError } from './common.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

export const STATUS_SPEC = defineCommand({
  name: 'status',
  operands: '[NAME]',
  summary: "Every lease: state, holder, token, time to expiry by the store's clock.",
  about: `Every lease (or just NAME) with its state, holder, token and time to expiry. Time is measured
by the store's clock (expiresAt - store now), never this machine's.`,
  flags: {
    ...STORE_FLAGS,
    json: {
      type: 'boolean',
      help:
        'an array of { name, state, holder, token (a string), expiresInMs, expiresAtMs, storeNowMs, termStartedAtMs, renewedAtMs } on stdout. ' +
        'expiresInMs is null for a free lease and negative for an expired one (it expired that long ago); [] when there are none',
    },
    ...LOG_FLAGS,
  },
  footer: `Exit 0 with the list (possibly empty); 2 usage; 3 store unreachable or schema missing.
On an error stdout stays empty and one line on stderr says what went wrong.`,
});

export const STATUS_USAGE = helpText(STATUS_SPEC);

export async function statusCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(STATUS_SPEC, argv);
  if (values.help === true) {
    out(STATUS_USAGE);
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals.length > 1) throw usageError(`status takes at most one lease name, got ${positionals.length}; see \`leasehold status --help\``);
  const name = positionals[0] === undefined ? undefined : validateLeaseName(positionals[0]);
  const { store } = await openStoreFromFlags(values);
  try {
    await requireCurrentSchema(store);
    const leases = await store.list(name === undefined ? {} : { name });
    const rows = leases.map((l) => ({
      name: l.name,
      state: l.state,
      holder: l.holder,
      token: l.token.toString(),
      expiresInMs: l.state === 'free' || l.expiresAtMs === null ? null : Math.round(l.expiresAtMs - l.storeNowMs),
      expiresAtMs: l.expiresAtMs,
      storeNowMs: l.storeNowMs,
      termStartedAtMs: l.termStartedAtMs,
      renewedAtMs: l.renewedAtMs,
    }));
    if (values.json === true) {
      out(toJson(rows));
      return EXIT.OK;
    }
    if (rows.length === 0) {
      out(name === undefined ? `no leases in ${store.description}` : `no lease named ${JSON.stringify(name)} in ${store.description}`);
      return EXIT.OK;
    }
    out(
      table(
        ['NAME', 'STATE', 'HOLDER', 'TOKEN', 'EXPIRES IN'],
        rows.map((r) => [
          r.name,
          r.state,
          r.holder ?? '-',
          r.token,
          r.expiresInMs === null ? '-' : r.expiresInMs >= 0 ? formatMs(r.expiresInMs) : `expired ${formatMs(-r.expiresInMs)} ago`,
        ]),
      ),
    );
    return EXIT.OK;
  } finally {
    await store.close();
  }
}
