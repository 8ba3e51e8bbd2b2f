/**
 * The etcd fleet's records as it reads them (./fleet.ts has the key layout): the agent and
 * ownership values, an agent beside its liveness term key, and an agent's row with the times
 * etcd can give. Shared by the registry's writes (./fleet.ts) and its listings (./fleet-list.ts).
 */
import { StoreError } from '../../core/errors.js';
import { AGENT_LEASE_PREFIX, type AgentRow, type Labels } from '../../fleet/port.js';
import { estimateExpiry, leaseRemaining } from './claim.js';
import type { EtcdKeyValue } from './client.js';
import { parseRenew, parseState, parseTerm, type EtcdKeys } from './keys.js';
import type { MemberPool } from './members.js';

export interface AgentValue {
  labels: Labels;
  startedAtMs: number;
  draining: boolean;
  deregisteredAtMs?: number;
  owned: number;
}

export interface OwnValue {
  agent: string;
  labels: Labels;
  placedAtMs: number;
  /** The token floor in force when this was written (decimal). */
  floor: string;
  /** Fresh per write: a write that landed but whose answer was lost (etcd3 retried it on another member) is recognised as ours. */
  writeId?: string;
}

function parse<T>(kv: EtcdKeyValue | undefined, ok: (v: T) => boolean): T | null {
  if (kv === undefined) return null;
  try {
    const v = JSON.parse(kv.value.toString()) as T;
    return typeof v === 'object' && v !== null && ok(v) ? v : null;
  } catch {
    return null;
  }
}

export const parseAgent = (kv: EtcdKeyValue | undefined): AgentValue | null =>
  parse<AgentValue>(kv, (v) => typeof v.labels === 'object' && v.labels !== null && typeof v.owned === 'number');
/** The ownership record; null when absent. @throws {StoreError} a value leasehold did not write. */
export function parseOwn(kv: EtcdKeyValue | undefined): OwnValue | null {
  if (kv === undefined) return null;
  const v = parse<OwnValue>(kv, (x) => typeof x.agent === 'string' && typeof x.floor === 'string' && /^\d+$/.test(x.floor));
  if (v === null) throw new StoreError(`etcd key ${kv.key.toString()} is not a fleet ownership record leasehold wrote; delete it, or use another prefix`);
  return v;
}

/** The generation of an ownership record: its key's mod revision plus the floor it was written under. */
export const generationOf = (kv: EtcdKeyValue, v: OwnValue): bigint => BigInt(kv.mod_revision) + BigInt(v.floor);

/** One agent in a snapshot: its record, and the term key of its liveness lease. */
export interface Candidate {
  id: string;
  kv: EtcdKeyValue;
  value: AgentValue;
  term: EtcdKeyValue | undefined;
}

/** The lease store's rule (./fleet.ts), by what etcd holds in this snapshot. */
export const isLive = (c: Candidate): boolean => c.value.deregisteredAtMs === undefined && c.term !== undefined && parseTerm(c.term) !== null;

export interface Ctx {
  client: MemberPool;
  keys: EtcdKeys;
  deadline: number;
}

/** Agents with their term keys, from what one read (or one page's reads) found. */
export function snapshotAgents(k: EtcdKeys, agentPrefix: string, agents: EtcdKeyValue[], terms: EtcdKeyValue[]): Map<string, Candidate> {
  const termOf = new Map<string, EtcdKeyValue>();
  for (const kv of terms) {
    const name = k.nameIn(kv.key, k.termPrefix);
    if (name?.startsWith(AGENT_LEASE_PREFIX) === true) termOf.set(name.slice(AGENT_LEASE_PREFIX.length), kv);
  }
  const out = new Map<string, Candidate>();
  for (const kv of agents) {
    const id = k.nameIn(kv.key, agentPrefix);
    const value = parseAgent(kv);
    if (id !== null && value !== null) out.set(id, { id, kv, value, term: termOf.get(id) });
  }
  return out;
}

/** Keys under `{p}/renew/agent%2F` or `{p}/state/agent%2F`, by agent id. */
export function byAgent(k: EtcdKeys, kvs: EtcdKeyValue[], prefix: string): Map<string, EtcdKeyValue> {
  const out = new Map<string, EtcdKeyValue>();
  for (const kv of kvs) {
    const name = k.nameIn(kv.key, prefix);
    if (name?.startsWith(AGENT_LEASE_PREFIX) === true) out.set(name.slice(AGENT_LEASE_PREFIX.length), kv);
  }
  return out;
}

type AgentRowAt = AgentRow & { deregisteredAtMs: number | null };

/**
 * Rows for agents, with the times etcd can give: expiry from LeaseTimeToLive on each live
 * term's etcd lease (whole seconds), refined by the last renewal's record exactly as the
 * lease store's `list()` does.
 */
export async function agentRows(c: Ctx, agents: Candidate[], renews: Map<string, EtcdKeyValue>, states: Map<string, EtcdKeyValue>): Promise<{ now: number; rows: Map<string, AgentRowAt> }> {
  const leases = [...new Set(agents.filter(isLive).map((a) => a.term!.lease))];
  const ttl = await leaseRemaining(c.client, leases, c.deadline);
  // The wall clock the store's time readings use (time.ts), as its lease rows do.
  const now = c.client.clock.wallNow();
  const rows = new Map<string, AgentRowAt>();
  for (const a of agents) {
    const renew = parseRenew(renews.get(a.id));
    const state = parseState(states.get(a.id));
    let live = isLive(a);
    let expiresAt: number | null;
    if (a.term !== undefined) {
      const remaining = ttl.get(a.term.lease);
      const recorded = renew !== null && renew.nonce === parseTerm(a.term)?.nonce ? renew.expiresAtMs : null;
      expiresAt = remaining === undefined ? recorded : estimateExpiry(remaining, recorded);
      // etcd already calls its lease expired; it deletes the key within its sweep (~500ms).
      if (remaining !== undefined && remaining.ttlSec < 0) live = false;
    } else {
      // The term key is gone, so etcd's expiry (or the release) is behind us: never in the future.
      const at = state?.endedBy !== undefined ? (state.endedAtMs ?? null) : (renew?.expiresAtMs ?? null);
      expiresAt = at === null ? null : Math.min(at, now);
    }
    rows.set(a.id, {
      id: a.id,
      labels: a.value.labels,
      startedAtMs: a.value.startedAtMs,
      draining: a.value.draining,
      deregistered: a.value.deregisteredAtMs !== undefined,
      live,
      owned: a.value.owned,
      heartbeatAgeMs: heartbeatAge(a.term, renew, a.term === undefined ? undefined : ttl.get(a.term.lease), now),
      expiresInMs: expiresAt === null ? null : expiresAt - now,
      storeNowMs: now,
      deregisteredAtMs: a.value.deregisteredAtMs ?? null,
    });
  }
  return { now, rows };
}

/**
 * Since the agent's last renewal: its renew record's time, or, for a term its session renews
 * (session.ts: a tick writes no per-term record), the time since etcd last had the session's
 * lease kept alive (granted TTL less remaining, whole seconds).
 */
function heartbeatAge(
  term: EtcdKeyValue | undefined,
  renew: { renewedAtMs: number } | null,
  lease: { ttlSec: number; grantedSec: number } | undefined,
  now: number,
): number | null {
  const byRecord = renew === null ? null : now - renew.renewedAtMs;
  if (parseTerm(term)?.session !== true || lease === undefined || lease.ttlSec < 0 || !Number.isFinite(lease.grantedSec)) return byRecord;
  const byLease = Math.max(0, (lease.grantedSec - lease.ttlSec) * 1000);
  return byRecord === null ? byLease : Math.min(byRecord, byLease);
}
