import { validateLeaseName } from '../core/config.js';
import { EXIT, formatMs, logFormatOption, openStoreFromFlags, out, requireCurrentSchema, setLogContext, table, toJson, usageError } from './common.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';
import { LeaseWatcher, type LeaseChange } from '../observe/index.js';
import type { LeaseAdmin, LeaseStore } from '../backends/store.js';
import { errorMessage } from '../core/errors.js';
import { cliLog } from './common.js';
import { escapeControls, jsonSafe } from './escape.js';

export const STATUS_SPEC = defineCommand({
  name: 'status',
  operands: '[NAME]',
  summary: "Every lease: state, holder, token, time to expiry by the store's clock.",
  about: `Every lease (or just NAME) with its state, holder, token and time to expiry. Time is measured
by the store's clock (expiresAt - store now), never this machine's.`,
  flags: {
    ...STORE_FLAGS,
    watch: {
      type: 'boolean',
      help:
        'keep watching, without contending: one line per change (a new holder or token, an expiry, a release or revocation) until ' +
        'interrupted; with --json one JSON object per line',
    },
    json: {
      type: 'boolean',
      help:
        'an array of { name, state, holder, token (a string), expiresInMs, expiresAtMs, storeNowMs, termStartedAtMs, renewedAtMs } on stdout. ' +
        'expiresInMs is null for a free lease and negative for an expired one (it expired that long ago); [] when there are none',
    },
    ...LOG_FLAGS,
  },
  footer: `With --watch, each line is: time (store clock), name, what changed (initial, new-term,
expired, freed, gone), holder, token, time to expiry; as JSON: { at, change, name, state, holder,
token, expiresInMs, storeNowMs }. Reads are bounded like a follower's: at the store-reported
expiry, on the store's release notifications, and with back-off while a lease is free.

Exit 0 with the list (possibly empty); 2 usage; 3 store unreachable or schema missing.
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
    if (values.watch === true) return await watchLeases(store, name, values.json === true);
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

function changeLine(c: LeaseChange, json: boolean): string {
  const l = c.lease;
  const expiresInMs = l.state === 'free' || l.expiresAtMs === null ? null : Math.round(l.expiresAtMs - l.storeNowMs);
  const at = new Date(l.storeNowMs).toISOString();
  if (json) {
    return jsonSafe(JSON.stringify({ at, change: c.kind, name: l.name, state: l.state, holder: l.holder, token: l.token.toString(), expiresInMs, storeNowMs: l.storeNowMs }));
  }
  const exp = expiresInMs === null ? '' : expiresInMs >= 0 ? ` expires in ${formatMs(expiresInMs)}` : ` expired ${formatMs(-expiresInMs)} ago`;
  return escapeControls(`${at} ${l.name} ${c.kind}: ${l.state} holder ${l.holder ?? '-'} token ${l.token}${exp}`);
}

/** `status --watch`: one line per change until SIGINT/SIGTERM (exit 0). Store errors are reported and retried. */
async function watchLeases(store: LeaseAdmin & Pick<LeaseStore, 'watchFreed'>, name: string | undefined, json: boolean): Promise<number> {
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);
  const watcher = new LeaseWatcher(store, { signal: stop.signal, ...(name === undefined ? {} : { name }) });
  let failing = false;
  watcher.on('change', (c) => {
    failing = false;
    out(changeLine(c, json));
  });
  watcher.on('store-error', (e) => {
    if (failing) return;
    failing = true;
    cliLog().warn(`store unreachable: ${errorMessage(e)}; still watching, retrying`);
  });
  try {
    await watcher.start();
    // The watcher's timers are unref'd: this keeps the process up until a signal.
    await new Promise<void>((resolve) => {
      const keep = setInterval(() => {}, 1 << 30);
      stop.signal.addEventListener('abort', () => {
        clearInterval(keep);
        resolve();
      }, { once: true });
    });
    return EXIT.OK;
  } finally {
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    await watcher.close();
  }
}
