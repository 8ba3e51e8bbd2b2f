import { validateLeaseName } from '../core/config.js';
import { EXIT, logFormatOption, openStoreFromFlags, out, requireCurrentSchema, setLogContext, table, toJson, usageError } from './common.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

export const HISTORY_SPEC = defineCommand({
  name: 'history',
  operands: '[NAME]',
  summary: 'Changes of holder (acquired, takeover, released, revoked) with the store\'s time.',
  about: `Every change of holder, oldest first, stamped with the store's clock: acquired (the lease was
free), takeover (the previous term had expired), released (by its holder), revoked (by an
operator, with the reason).`,
  flags: {
    ...STORE_FLAGS,
    limit: { type: 'string', value: 'N', help: 'the most recent N entries, 1 to 100000', default: '50' },
    json: {
      type: 'boolean',
      help: 'an array of { id, name, event, holder, previousHolder, token, atMs, at, detail } on stdout; id and token are strings',
    },
    ...LOG_FLAGS,
  },
  footer: `Exit 0 with the entries (possibly none); 2 usage; 3 store unreachable or schema missing.
On an error stdout stays empty and one line on stderr says what went wrong.`,
});

export const HISTORY_USAGE = helpText(HISTORY_SPEC);

export async function historyCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(HISTORY_SPEC, argv);
  if (values.help === true) {
    out(HISTORY_USAGE);
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals.length > 1) throw usageError(`history takes at most one lease name, got ${positionals.length}; see \`leasehold history --help\``);
  const name = positionals[0] === undefined ? undefined : validateLeaseName(positionals[0]);
  let limit = 50;
  if (values.limit !== undefined) {
    if (!/^\d+$/.test(values.limit) || Number(values.limit) < 1 || Number(values.limit) > 100_000) {
      throw usageError(`--limit ${JSON.stringify(values.limit)} is not a count; give a whole number from 1 to 100000`);
    }
    limit = Number(values.limit);
  }
  const { store } = await openStoreFromFlags(values);
  try {
    await requireCurrentSchema(store);
    const entries = await store.history({ ...(name === undefined ? {} : { name }), limit });
    const rows = entries.map((e) => ({
      id: e.id.toString(),
      name: e.name,
      event: e.event,
      holder: e.holder,
      previousHolder: e.previousHolder,
      token: e.token.toString(),
      atMs: e.atMs,
      at: new Date(e.atMs).toISOString(),
      detail: e.detail,
    }));
    if (values.json === true) {
      out(toJson(rows));
      return EXIT.OK;
    }
    if (rows.length === 0) {
      out(name === undefined ? `no history in ${store.description}` : `no history for ${JSON.stringify(name)} in ${store.description}`);
      return EXIT.OK;
    }
    out(
      table(
        ['AT (STORE CLOCK)', 'NAME', 'EVENT', 'TOKEN', 'HOLDER', 'PREVIOUS', 'DETAIL'],
        rows.map((r) => [r.at, r.name, r.event, r.token, r.holder ?? '-', r.previousHolder ?? '-', r.detail ?? '']),
      ),
    );
    return EXIT.OK;
  } finally {
    await store.close();
  }
}
