/**
 * `leasehold prune`: retention for the slot ledger (src/scheduler/retention.ts says what stays
 * and why). The library's pruneLedger does the work; this parses, opens the store, and reports.
 */
import { openFleetPort, openSlotLedger } from '../backends/index.js';
import { pruneFleet, type PruneFleetResult } from '../fleet/retention.js';
import { DEFAULT_RETENTION, parseHorizon, pruneLedger } from '../scheduler/retention.js';
import { errorMessage } from '../core/errors.js';
import { EXIT, formatMs, logFormatOption, openStoreFromFlags, out, requireCurrentSchema, setLogContext, toJson, usageError } from './common.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

export const PRUNE_SPEC = defineCommand({
  name: 'prune',
  summary: "Delete a schedule's old slot ledger rows (or every schedule's), keeping what catch-up and history need.",
  about: `Deletes slot ledger rows whose slot time is older than --older-than, by the store's clock, in
short batches that running schedules' claims go between. Never deleted: the newest --keep rows
of each schedule, the newest row older than the horizon (without it a new leader would take the
schedule for a new one and owe nothing), rows inside the catch-up window (--older-than may not
be shorter than --catch-up-window), and 'claimed' rows (a job not finished). \`run --once-per\`
keys are kept unless --once-per is given: a pruned key runs again. With --fleet, the records
of agents deregistered before --older-than, and their ownership records, go too; a registered
agent's never do, and generations keep increasing (their counter is never pruned).`,
  flags: {
    'older-than': { type: 'string', value: 'D', required: true, help: 'delete rows whose slot is older than this, by the store\'s clock (30d is the library\'s default)' },
    name: { type: 'string', value: 'NAME', help: 'only this schedule (default: every name in the ledger)' },
    keep: { type: 'string', value: 'N', help: 'the newest N rows of each schedule stay whatever their age, at least 1', default: String(DEFAULT_RETENTION.keep) },
    'once-per': { type: 'boolean', help: '`run --once-per` keys that ended before --older-than go too (each would run again if given again)' },
    'catch-up-window': {
      type: 'string',
      value: 'D',
      help: 'the longest --catch-up-window of the schedules pruned: --older-than may not be shorter',
      default: '1h',
    },
    fleet: {
      type: 'boolean',
      help: 'also the fleet: ownership and agent records of agents deregistered before --older-than (never a registered agent\'s)',
    },
    json: { type: 'boolean', help: 'print the result as one JSON object: { store, deleted, byName, batches, fleet, ... }' },
    ...STORE_FLAGS,
    ...LOG_FLAGS,
  },
  footer: 'Exit 0 when pruned (nothing to delete included); 2 usage; 3 store unreachable or schema not current.',
});

export const PRUNE_USAGE = helpText(PRUNE_SPEC);

export async function pruneCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(PRUNE_SPEC, argv);
  if (values.help === true) {
    out(PRUNE_USAGE);
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals.length > 0) throw usageError(`prune takes no arguments, got ${JSON.stringify(positionals[0])}; use --name NAME for one schedule`);
  // All checked before the store is opened: a typo must not half-run a prune.
  if (values['older-than'] === undefined) throw usageError(`prune needs --older-than D (for example --older-than ${DEFAULT_RETENTION.olderThan})`);
  const olderThanMs = duration(values['older-than'], 'older-than');
  const windowMs = duration(values['catch-up-window'] ?? '1h', 'catch-up-window');
  if (olderThanMs < windowMs) {
    throw usageError(
      `--older-than ${formatMs(olderThanMs)} is shorter than the catch-up window (${formatMs(windowMs)}): rows inside it are what a new leader reads to tell a missed slot from one that ran; give a longer --older-than`,
    );
  }
  let keep: number = DEFAULT_RETENTION.keep;
  if (values.keep !== undefined) {
    if (!/^\d+$/.test(values.keep) || Number(values.keep) < 1) throw usageError(`--keep ${JSON.stringify(values.keep)} is not a count; give a whole number, at least 1`);
    keep = Number(values.keep);
  }
  const { store, url } = await openStoreFromFlags(values);
  try {
    await requireCurrentSchema(store);
    const ledger = await openSlotLedger(store, url);
    try {
      const r = await pruneLedger(ledger, {
        olderThan: olderThanMs,
        catchUpWindow: windowMs,
        keep,
        oncePer: values['once-per'] === true,
        ...(values.name === undefined ? {} : { name: values.name }),
      });
      let fleet: PruneFleetResult | undefined;
      if (values.fleet === true) {
        const port = await openFleetPort(store);
        try {
          fleet = await pruneFleet(port, { olderThan: olderThanMs });
        } finally {
          await port.close();
        }
      }
      if (values.json === true) {
        out(
          toJson({
            store: store.description,
            kind: store.kind,
            olderThanMs,
            keep,
            oncePer: values['once-per'] === true,
            deleted: r.deleted,
            byName: r.byName,
            batches: r.batches,
            fleet: fleet === undefined ? null : { ownership: fleet.ownership, agents: fleet.agents },
          }),
        );
        return EXIT.OK;
      }
      const names = Object.keys(r.byName);
      out(
        `${store.description}: deleted ${r.deleted} slot row${r.deleted === 1 ? '' : 's'} older than ${formatMs(olderThanMs)} from ${names.length} name${names.length === 1 ? '' : 's'}` +
          ` (the newest ${keep} of each kept${values['once-per'] === true ? '; once-per keys included' : ''})`,
      );
      for (const [name, n] of Object.entries(r.byName)) if (n > 0) out(`  ${name}: ${n}`);
      if (fleet !== undefined) {
        out(`${store.description}: deleted ${fleet.ownership} ownership record${fleet.ownership === 1 ? '' : 's'} and ${fleet.agents} agent record${fleet.agents === 1 ? '' : 's'} of agents deregistered more than ${formatMs(olderThanMs)} ago`);
      }
      return EXIT.OK;
    } finally {
      await ledger.close();
    }
  } finally {
    await store.close();
  }
}

function duration(value: string, flag: string): number {
  try {
    return parseHorizon(value, `--${flag}`);
  } catch (err) {
    throw usageError(errorMessage(err));
  }
}
