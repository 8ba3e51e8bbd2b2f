import { validateLeaseName } from '../core/config.js';
import { EXIT, cliLog, logFormatOption, openStoreFromFlags, out, requireCurrentSchema, setLogContext, toJson, usageError } from './common.js';
import { escapeControls } from './escape.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

export const RELEASE_SPEC = defineCommand({
  name: 'release',
  operands: 'NAME',
  summary: 'Operator revocation: the holder stands down at its next renewal.',
  about: `Operator revocation: ends the current holder's term in the store, now, and records it (with
the reason) in the history. The holder finds out at its next renewal and stands down (a
\`leasehold run\` kills its command and exits 76); a waiting process may take over at once, with
a larger token, so the old holder's late writes are fenced.`,
  flags: {
    force: { type: 'boolean', required: true, help: 'required: this takes the lease away from a process that may still be working' },
    reason: { type: 'string', value: 'TEXT', required: true, help: 'required: why, for the humans reading the history later' },
    ...STORE_FLAGS,
    json: {
      type: 'boolean',
      help:
        'one object on stdout: { name, revoked, token, holder, reason, detail }. revoked false (exit 1) when nothing was held: ' +
        'detail "no-such-lease" (token null) or "not-held" (token the last one issued); token is a string',
    },
    ...LOG_FLAGS,
  },
  footer: `Exit 0 when a term was revoked; 1 when there is no lease by that name or it is not held
(with --json, the object still goes to stdout); 2 usage; 3 store unreachable or schema missing.`,
});

export const RELEASE_USAGE = helpText(RELEASE_SPEC);

/** What `release --json` prints. */
export interface ReleaseReport {
  name: string;
  revoked: boolean;
  /** The revoked term's token; when nothing was revoked, the last token issued (null: no such lease). */
  token: string | null;
  /** The holder whose term was revoked (null when nothing was). */
  holder: string | null;
  reason: string;
  detail: 'revoked' | 'no-such-lease' | 'not-held';
}

export async function releaseCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(RELEASE_SPEC, argv);
  if (values.help === true) {
    out(RELEASE_USAGE);
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals.length === 0) throw usageError('release needs the lease NAME; write leasehold release NAME --force --reason TEXT');
  if (positionals.length > 1) throw usageError(`release takes one lease name, got ${positionals.length}; quote a reason with spaces: --reason "..."`);
  const name = validateLeaseName(positionals[0]);
  if (values.force !== true) {
    throw usageError(
      `release takes lease ${JSON.stringify(name)} away from its holder, which may still be working; add --force (and --reason TEXT) to revoke it`,
    );
  }
  const reason = values.reason?.trim();
  if (reason === undefined || reason === '') {
    throw usageError('release --force needs --reason TEXT: the reason is recorded in the history for whoever reads it later');
  }
  const { store } = await openStoreFromFlags(values);
  try {
    await requireCurrentSchema(store);
    const r = await store.revoke(name, reason);
    const report: ReleaseReport = {
      name,
      revoked: r.revoked,
      token: r.token === null ? null : r.token.toString(),
      holder: r.revoked ? r.previousHolder : null,
      reason,
      detail: r.revoked ? 'revoked' : r.token === null ? 'no-such-lease' : 'not-held',
    };
    if (values.json === true) out(toJson(report));
    if (r.revoked) {
      if (values.json !== true) out(escapeControls(`revoked lease ${JSON.stringify(name)} from ${r.previousHolder ?? 'its holder'} (token ${r.token ?? '?'}): ${reason}`));
      return EXIT.OK;
    }
    // Also with --json: the one line on stderr is what a person (or a cron mail) reads.
    if (r.token === null) {
      cliLog().error(`no lease named ${JSON.stringify(name)} in ${store.description}; \`leasehold status\` lists them`, { exitCode: EXIT.FAILED });
    } else {
      cliLog().error(`lease ${JSON.stringify(name)} is not held (last token ${r.token}); nothing to revoke`, { exitCode: EXIT.FAILED });
    }
    return EXIT.FAILED;
  } finally {
    await store.close();
  }
}
