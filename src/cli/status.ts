import { parseArgs } from 'node:util';
import { validateLeaseName } from '../core/config.js';
import { EXIT, STORE_OPTIONS, formatMs, openStoreFromFlags, out, requireCurrentSchema, table, toJson, usageError } from './common.js';

export const STATUS_USAGE = `Usage: leasehold status [NAME] [--store URL] [--json]

Every lease (or just NAME) with its state, holder, token and time to expiry. Time is measured
by the store's clock (expiresAt - store now), never this machine's.

  --json   an array of { name, state, holder, token (a string), expiresInMs, expiresAtMs,
           storeNowMs, termStartedAtMs, renewedAtMs }. expiresInMs is null for a free lease
           and negative for an expired one (it expired that long ago). [] when there are none.`;

export async function statusCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { ...STORE_OPTIONS, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
    allowPositionals: true,
  });
  if (values.help === true) {
    out(STATUS_USAGE);
    return EXIT.OK;
  }
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
