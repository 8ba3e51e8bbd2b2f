/**
 * The claim rule as a table: every row state x every request, each driven through a real store
 * with nothing but its public calls (claim, release, revoke, migrate), and each answer compared
 * with what `decideClaim` (core/claim-rule.ts) says for the same row and request.
 *
 * Tokens differ by store (a counter, the server's TIME, etcd's create revision plus a floor), so
 * the comparison is of outcome, reason, holder, and token order: a renewal keeps the token, an
 * acquisition's is larger than every token the name had and than the floor. After the claim,
 * `list` must show the row the rule says it leaves (holder and held/expired/free), and an
 * acquisition or a clone conflict must be the name's newest history entry.
 */
import { newNonce } from '../core/identity.js';
import { decideClaim, leaseState, rowAfterClaim, type ClaimDecision, type LeaseRowState } from '../core/claim-rule.js';
import type { ClaimRequest, ClaimResult } from '../core/port.js';
import type { LeaseStore } from '../backends/store.js';

/** Our holder id, and another process's. */
export const US = 'holder-us';
export const THEM = 'holder-them';

/** The abstract clock the model rows are judged by: live rows end after it, expired ones before. */
const MODEL_NOW = 0;
const LIVE = Number.MAX_SAFE_INTEGER;
const PAST = -1;

/** What setting a row state up left behind. */
export interface Prepared {
  /** The row as the rule sees it (undefined: never claimed). Token: the real store's. */
  model: LeaseRowState | undefined;
  /** The nonce stored last for this name (a fresh one when none was). */
  nonce: string;
  /** The largest token the name (or the floor) has had; acquisitions must go above it. */
  above: bigint | null;
  /** Wait until the store reports the term expired before sending the request. */
  expire: boolean;
}

interface SetupContext {
  store: LeaseStore;
  name: string;
  /** The TTL for terms that must expire before the request. */
  shortTtlMs: number;
}

export interface RowStateCase {
  id: string;
  title: string;
  /** Needs the store's token floor (`migrate({ minToken })`) and a namespace of its own. */
  floor?: bigint;
  setup(ctx: SetupContext): Promise<Prepared>;
}

export interface RequestCase {
  id: string;
  title: string;
  /** The request for a lease whose last stored nonce is `nonce`. */
  make(name: string, nonce: string): ClaimRequest;
}

const LONG_TTL = 60_000;

async function grant(store: LeaseStore, name: string, holder: string, ttlMs: number): Promise<{ nonce: string; token: bigint }> {
  const nonce = newNonce();
  const [r] = await store.claim([{ name, holder, ttlMs, expect: null, nextNonce: nonce }]);
  if (r === undefined || r.outcome !== 'acquired') throw new Error(`setting up "${name}": ${holder} could not acquire (${r?.outcome ?? 'no answer'})`);
  return { nonce, token: r.token };
}

function row(holder: string | null, nonce: string | null, token: bigint, expiresAtMs: number, endedBy: LeaseRowState['endedBy'] = null): LeaseRowState {
  return { holder, nonce, token, expiresAtMs, endedBy };
}

/** A floor above anything a store issues by itself (Redis tokens are microseconds, ~2^51). */
const TABLE_FLOOR = 2n ** 52n;

export const ROW_STATES: RowStateCase[] = [
  {
    id: 'no-row',
    title: 'no row (never claimed)',
    setup: () => Promise.resolve({ model: undefined, nonce: newNonce(), above: null, expire: false }),
  },
  {
    id: 'live-ours',
    title: 'live, held by us (our nonce is the stored one)',
    async setup({ store, name }) {
      const g = await grant(store, name, US, LONG_TTL);
      return { model: row(US, g.nonce, g.token, LIVE), nonce: g.nonce, above: g.token, expire: false };
    },
  },
  {
    id: 'expired-ours',
    title: 'expired, still naming us (nobody took it)',
    async setup({ store, name, shortTtlMs }) {
      const g = await grant(store, name, US, shortTtlMs);
      return { model: row(US, g.nonce, g.token, PAST), nonce: g.nonce, above: g.token, expire: true };
    },
  },
  {
    id: 'live-theirs',
    title: 'live, held by another holder',
    async setup({ store, name }) {
      const g = await grant(store, name, THEM, LONG_TTL);
      return { model: row(THEM, g.nonce, g.token, LIVE), nonce: g.nonce, above: g.token, expire: false };
    },
  },
  {
    id: 'expired-theirs',
    title: 'expired, still naming another holder',
    async setup({ store, name, shortTtlMs }) {
      const g = await grant(store, name, THEM, shortTtlMs);
      return { model: row(THEM, g.nonce, g.token, PAST), nonce: g.nonce, above: g.token, expire: true };
    },
  },
  {
    id: 'released',
    title: 'free: our term was released',
    async setup({ store, name }) {
      const g = await grant(store, name, US, LONG_TTL);
      if (!(await store.release({ name, holder: US, expect: [g.nonce] }))) throw new Error(`setting up "${name}": release refused`);
      return { model: row(null, null, g.token, PAST, 'released'), nonce: g.nonce, above: g.token, expire: false };
    },
  },
  {
    id: 'revoked',
    title: 'free: our term was revoked by an operator',
    async setup({ store, name }) {
      const g = await grant(store, name, US, LONG_TTL);
      if (!(await store.revoke(name, 'conformance table')).revoked) throw new Error(`setting up "${name}": revoke refused`);
      return { model: row(null, null, g.token, PAST, 'revoked'), nonce: g.nonce, above: g.token, expire: false };
    },
  },
  {
    id: 'conflict',
    title: 'free: our term was ended by a clone conflict',
    async setup({ store, name }) {
      const g = await grant(store, name, US, LONG_TTL);
      const [r] = await store.claim([{ name, holder: US, ttlMs: LONG_TTL, expect: [newNonce()], nextNonce: newNonce() }]);
      if (r?.outcome !== 'lost') throw new Error(`setting up "${name}": a clone's renewal was answered ${r?.outcome ?? 'nothing'}`);
      return { model: row(null, null, g.token, PAST, 'conflict'), nonce: g.nonce, above: g.token, expire: false };
    },
  },
  {
    id: 'floor-no-row',
    title: 'no row, under a token floor',
    floor: TABLE_FLOOR,
    setup: () => Promise.resolve({ model: undefined, nonce: newNonce(), above: TABLE_FLOOR, expire: false }),
  },
  {
    id: 'floor-released',
    title: 'free (released), its token below a token floor raised since',
    floor: TABLE_FLOOR,
    async setup({ store, name }) {
      // The floor is raised by the table after every setup of this namespace.
      const g = await grant(store, name, US, LONG_TTL);
      if (!(await store.release({ name, holder: US, expect: [g.nonce] }))) throw new Error(`setting up "${name}": release refused`);
      return { model: row(null, null, g.token, PAST, 'released'), nonce: g.nonce, above: TABLE_FLOOR, expire: false };
    },
  },
];

export const REQUESTS: RequestCase[] = [
  {
    id: 'contend',
    title: 'we contend (expect null)',
    make: (name) => ({ name, holder: US, ttlMs: LONG_TTL, expect: null, nextNonce: newNonce() }),
  },
  {
    id: 'renew',
    title: 'we renew with the stored nonce',
    make: (name, nonce) => ({ name, holder: US, ttlMs: LONG_TTL, expect: [nonce], nextNonce: newNonce() }),
  },
  {
    id: 'renew-retry',
    title: 'we renew with an unanswered nonce and the stored one',
    make: (name, nonce) => ({ name, holder: US, ttlMs: LONG_TTL, expect: [newNonce(), nonce], nextNonce: newNonce() }),
  },
  {
    id: 'renew-clone',
    title: 'we renew with a nonce the store never held (a clone of us renewed since)',
    make: (name) => ({ name, holder: US, ttlMs: LONG_TTL, expect: [newNonce()], nextNonce: newNonce() }),
  },
];

/** The rule's answer for a prepared row, judged at the model's clock. */
export function expected(p: Prepared, req: ClaimRequest, floor: bigint): ClaimDecision {
  return decideClaim(p.model, req, MODEL_NOW, floor);
}

/** What `list` must show after the claim: the row the rule leaves. */
export function expectedListing(p: Prepared, req: ClaimRequest, d: ClaimDecision): { holder: string | null; state: 'held' | 'expired' | 'free' } | undefined {
  const after = rowAfterClaim(p.model, req, d, MODEL_NOW) ?? p.model;
  if (after === undefined) return undefined;
  return { holder: after.holder, state: leaseState(after.holder, after.expiresAtMs, MODEL_NOW) };
}

/**
 * Differences between a store's answer and the rule's, as sentences (empty: they agree).
 * Absolute tokens are not compared; their order is.
 */
export function compare(p: Prepared, d: ClaimDecision, got: ClaimResult): string[] {
  const out: string[] = [];
  if (got.outcome !== d.outcome) return [`outcome ${got.outcome}${got.outcome === 'lost' ? `/${got.reason}` : ''}, the rule says ${d.outcome}${d.outcome === 'lost' ? `/${d.reason}` : ''}`];
  switch (d.outcome) {
    case 'acquired':
      if (got.holder !== US) out.push(`holder ${got.holder}, expected ${US}`);
      if (got.token === null || (p.above !== null && got.token <= p.above)) out.push(`token ${got.token} is not above ${p.above}`);
      break;
    case 'renewed':
      if (got.token !== d.token) out.push(`a renewal changed the token: ${got.token}, the term's is ${d.token}`);
      break;
    case 'busy':
      if (got.holder !== d.holder) out.push(`busy with holder ${got.holder}, the row's holder is ${d.holder}`);
      if (got.token !== null && got.token !== d.token) out.push(`busy with token ${got.token}, the live term's is ${d.token}`);
      if (got.expiresAtMs !== null && got.expiresAtMs <= got.storeNowMs) out.push(`busy, but the reported expiry ${got.expiresAtMs} is not after the store's now ${got.storeNowMs}`);
      break;
    case 'lost':
      if (got.outcome === 'lost' && got.reason !== d.reason) out.push(`lost/${got.reason}, the rule says lost/${d.reason}`);
      if (got.holder !== d.holder) out.push(`lost with holder ${got.holder}, the rule says ${d.holder}`);
      break;
  }
  return out;
}
