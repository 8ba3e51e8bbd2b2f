import { parseArgs } from 'node:util';
import { validateLeaseName } from '../core/config.js';
import { EXIT, STORE_OPTIONS, err, openStoreFromFlags, out, requireCurrentSchema, usageError } from './common.js';

export const RELEASE_USAGE = `Usage: leasehold release NAME --force --reason TEXT [--store URL]

Operator revocation: ends the current holder's term in the store, now, and records it (with
the reason) in the history. The holder finds out at its next renewal and stands down (a
\`leasehold run\` kills its command and exits 76); a waiting process may take over at once, with
a larger token, so the old holder's late writes are fenced.

  --force         required: this takes the lease away from a process that may still be working
  --reason TEXT   required: why, for the humans reading the history later

Exit 0 when a term was revoked; 1 when there is no lease by that name or it is not held.`;

export async function releaseCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { ...STORE_OPTIONS, force: { type: 'boolean' }, reason: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    strict: true,
    allowPositionals: true,
  });
  if (values.help === true) {
    out(RELEASE_USAGE);
    return EXIT.OK;
  }
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
    if (r.revoked) {
      out(`revoked lease ${JSON.stringify(name)} from ${r.previousHolder ?? 'its holder'} (token ${r.token ?? '?'}): ${reason}`);
      return EXIT.OK;
    }
    if (r.token === null) {
      err(`leasehold: no lease named ${JSON.stringify(name)} in ${store.description}; \`leasehold status\` lists them`);
    } else {
      err(`leasehold: lease ${JSON.stringify(name)} is not held (last token ${r.token}); nothing to revoke`);
    }
    return EXIT.FAILED;
  } finally {
    await store.close();
  }
}
