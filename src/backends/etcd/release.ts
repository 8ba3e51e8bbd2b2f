import { newNonce } from '../../core/identity.js';
import type { ReleaseRequest } from '../store.js';
import type { SeenState } from './seen.js';
import type { EtcdKeyValue, EtcdRequestOp, EtcdTxnRequest, EtcdTxnResponse } from './client.js';
import { json, parseState, parseTerm, type EtcdKeys, type HistoryValue, type StateValue } from './keys.js';
import type { Lanes } from './lanes.js';
import type { SessionBook } from './session-book.js';
import { first, guarded, rangeOf, schemaOk } from './txn.js';

/**
 * The write that ends a term just read, compared on the revisions read (its term and state keys
 * unchanged since): for one release or revocation (store.ts, endTerm) and for each lease of a
 * batch release (releaseBatch below).
 */
export function endWrite(
  k: EtcdKeys,
  atMs: number,
  name: string,
  termKv: EtcdKeyValue,
  stateKv: EtcdKeyValue | undefined,
  term: { holder: string; nonce: string },
  state: ReturnType<typeof parseState>,
  how: 'released' | 'revoked',
  detail: string | null,
  endedId: string,
): { token: bigint; startedAtMs: number; ops: EtcdRequestOp[]; compare: NonNullable<EtcdTxnRequest['compare']> } {
  const T = k.term(name);
  const S = k.state(name);
  const token = k.token(termKv.create_revision!);
  const ended: StateValue = {
    holder: term.holder,
    token: token.toString(),
    startedAtMs: state?.startedAtMs ?? atMs,
    endedBy: how,
    endedAtMs: atMs,
    nonce: term.nonce,
    endedId,
  };
  const entry: HistoryValue = { name, event: how, holder: null, previousHolder: term.holder, token: token.toString(), atMs, detail, seq: 0 };
  return {
    token,
    startedAtMs: ended.startedAtMs,
    ops: [
      { request_delete_range: { key: T } },
      { request_put: { key: S, value: json(ended) } },
      { request_put: { key: k.history(name, endedId), value: json(entry) } },
      // For the session renewing the term, if any (session.ts): a tick does not see deletes.
      // The lease exists: the term key is compared, and etcd deletes a lease's keys with it.
      ...(termKv.lease === '0' ? [] : [{ request_put: { key: k.ended(termKv.lease, name), value: Buffer.from(String(termKv.create_revision)), lease: termKv.lease } }]),
    ],
    compare: [
      { key: T, target: 'Mod', result: 'Equal', mod_revision: termKv.mod_revision },
      { key: S, target: 'Mod', result: 'Equal', mod_revision: stateKv?.mod_revision ?? '0' },
    ],
  };
}

interface ReleaseContext {
  keys: EtcdKeys;
  wallNow(): number;
  /** etcd's --max-txn-ops. */
  maxOpsPerTxn: number;
  /** Where each chunk waits its turn (lanes.ts); shared by every batch release of the store. */
  lanes: Lanes;
  /** A transaction; `deadline` is the chunk's own (the store's call timeout from its lane). */
  txn(req: EtcdTxnRequest, what: string, deadline: number): Promise<EtcdTxnResponse>;
  /** The deadline of a chunk that starts now. */
  chunkDeadline(): number;
  /** The caller gave up (its signal): chunks not yet sent are not sent. */
  signal?: AbortSignal | undefined;
  sessions: SessionBook;
  seen: Map<string, SeenState>;
  /** One release on its own, with the store's retries (for a lease that changed under the batch). */
  releaseOne(req: ReleaseRequest): Promise<boolean>;
}

/**
 * Many releases: per chunk one Txn reading every term and state key, then one Txn with a nested
 * Txn per lease of ours, each compared on the revisions read, so one lease that changed fails
 * alone. A chunk of n reads 2n keys, and its write is n nested Txns whose deepest level is 4 ops,
 * within what the parent leaves (claim.ts, chunk): both fit --max-txn-ops at n = (maxOps - 4) / 2.
 *
 * Chunks take turns in the store's lanes (lanes.ts), each with its own deadline from when its
 * turn comes: what must fit in the call timeout is one chunk, not the whole close. The first
 * chunk that fails fails the call, and the chunks still waiting are not sent (etcd is down or
 * slow; their leases expire instead, as a release is best effort).
 */
export async function releaseBatch(ctx: ReleaseContext, requests: readonly ReleaseRequest[]): Promise<boolean[]> {
  const size = Math.max(1, Math.floor((ctx.maxOpsPerTxn - 4) / 2));
  const chunks: ReleaseRequest[][] = [];
  for (let i = 0; i < requests.length; i += size) chunks.push(requests.slice(i, i + size));
  let firstError: unknown;
  const answers = await Promise.all(
    chunks.map((part) =>
      ctx.lanes.run(async () => {
        if (firstError !== undefined) throw firstError;
        ctx.signal?.throwIfAborted();
        try {
          return await releaseChunk(ctx, part, ctx.chunkDeadline());
        } catch (err) {
          firstError ??= err;
          throw err;
        }
      }),
    ),
  );
  return answers.flat();
}

async function releaseChunk(ctx: ReleaseContext, part: readonly ReleaseRequest[], deadline: number): Promise<boolean[]> {
  const k = ctx.keys;
  const read = await ctx.txn(guarded(k, part.flatMap((r) => [rangeOf(k.term(r.name)), rangeOf(k.state(r.name))])), 'release', deadline);
  schemaOk(k, read);
  // undefined: changed between the read and the write, released on its own below.
  const out: (boolean | undefined)[] = part.map(() => false);
  const writes: { i: number; name: string; holder: string; startedAtMs: number; endedId: string; op: EtcdRequestOp }[] = [];
  const atMs = ctx.wallNow();
  part.forEach((req, i) => {
    const termKv = first(read.responses[2 * i]);
    const stateKv = first(read.responses[2 * i + 1]);
    const term = parseTerm(termKv);
    if (termKv === undefined || term === null) return;
    // As store.ts's release: a term its session renews keeps the nonce of the renewal that
    // moved it there; the nonces since are the session's.
    const held = ctx.sessions.find(req.holder, req.name);
    const rev = String(termKv.create_revision);
    const ours = term.holder === req.holder && (req.expect.includes(term.nonce) || (held !== undefined && held.rev === rev && req.expect.includes(held.nonce)));
    if (!ours) return;
    const endedId = newNonce();
    const w = endWrite(k, atMs, req.name, termKv, stateKv, term, parseState(stateKv), 'released', null, endedId);
    writes.push({ i, name: req.name, holder: term.holder, startedAtMs: w.startedAtMs, endedId, op: { request_txn: { compare: w.compare, success: w.ops, failure: [] } } });
  });
  if (writes.length > 0) {
    const write = await ctx.txn(guarded(k, writes.map((w) => w.op)), 'release', deadline);
    schemaOk(k, write);
    const revision = write.header?.revision ?? '0';
    const released = (w: (typeof writes)[number], rev: string): void => {
      ctx.sessions.forget(w.name);
      // Released: a contender's unlessReleasedSince is judged on this as on a read (claim.ts).
      ctx.seen.set(w.name, { rev, holder: w.holder, ended: true, releasedStartedAtMs: w.startedAtMs });
      out[w.i] = true;
    };
    const failed: typeof writes = [];
    writes.forEach((w, j) => {
      if (write.responses[j]?.response_txn?.succeeded === true) released(w, revision);
      else failed.push(w);
    });
    // A write whose answer was lost and that the pool sent again (members.ts) lands once:
    // the retry's compares then fail on our own delete. The state key names the write that
    // ended the term (endedId, fresh per lease), so one read tells ours from anyone else's;
    // the rest changed under the batch and are released on their own.
    if (failed.length > 0) {
      const check = await ctx.txn(guarded(k, failed.map((w) => rangeOf(k.state(w.name)))), 'release', deadline);
      schemaOk(k, check);
      failed.forEach((w, j) => {
        const stateKv = first(check.responses[j]);
        if (parseState(stateKv)?.endedId === w.endedId) released(w, String(stateKv!.mod_revision));
        else out[w.i] = undefined;
      });
    }
  }
  return Promise.all(part.map((req, i) => (out[i] === undefined ? ctx.releaseOne(req) : Promise.resolve(out[i]!))));
}
