import { parseArgs } from 'node:util';
import { validateLeaseName } from '../core/config.js';
import { EXIT, STORE_OPTIONS, openStoreFromFlags, out, requireCurrentSchema, table, toJson, usageError } from './common.js';

export const HISTORY_USAGE = `Usage: leasehold history [NAME] [--store URL] [--json] [--limit N]

Every change of holder, oldest first, stamped with the store's clock: acquired (the lease was
free), takeover (the previous term had expired), released (by its holder), revoked (by an
operator, with the reason).

  --limit N   the most recent N entries (default 50)
  --json      an array of { id, name, event, holder, previousHolder, token, atMs, at, detail };
              id and token are strings`;

export async function historyCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { ...STORE_OPTIONS, json: { type: 'boolean' }, limit: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
    allowPositionals: true,
  });
  if (values.help === true) {
    out(HISTORY_USAGE);
    return EXIT.OK;
  }
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
