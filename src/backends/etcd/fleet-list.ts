/**
 * The etcd fleet's reads of many records (./fleet.ts has the key layout): the agents listing and
 * the resources listing (a placement walks the load index instead, fleet-load.ts). gRPC refuses
 * an answer over its 4 MB receive limit (pages.ts), so neither reads a whole range in one answer
 * once it is large: each reads a page of records, then the liveness keys of that page's agents.
 */
import { AGENT_LEASE_PREFIX, type AgentRow, type OwnerRow, type ResourcePage, type ResourcePageRequest } from '../../fleet/port.js';
import type { EtcdKeyValue, EtcdRequestOp } from './client.js';
import { byAgent, agentRows, generationOf, parseAgent, parseOwn, snapshotAgents, type Candidate, type Ctx } from './fleet-rows.js';
import { prefixEnd, type EtcdKeys } from './keys.js';
import { page, pages, type PageTxn } from './pages.js';
import { all, first, rangeOf } from './txn.js';

/** Agent records whose liveness keys one Txn reads (4 ops each): under etcd's default --max-txn-ops of 128. */
const AGENTS_PER_TXN = 25;

/** Where the fleet's keys live under the store's prefix (./fleet.ts). */
export interface FleetKeys {
  keys: EtcdKeys;
  /** `{p}/fleet/agent/` */
  agentPrefix: string;
  /** `{p}/fleet/own/` */
  ownPrefix: string;
}

const lp = encodeURIComponent(AGENT_LEASE_PREFIX);

/** The keys under `prefix` of `agent/<id>` for the ids from `firstId` to `lastId` (encoded): exactly those, as one range. */
function span(prefix: string, firstId: Buffer, lastId: Buffer): EtcdRequestOp {
  return { request_range: { key: Buffer.concat([Buffer.from(prefix + lp), firstId]), range_end: Buffer.concat([Buffer.from(prefix + lp), lastId, Buffer.from([0])]) } };
}

/** A page of agent records with its agents' term keys (and renewal and state keys, with `times`) in one more read. */
async function withLiveness(
  txn: PageTxn,
  f: FleetKeys,
  records: EtcdKeyValue[],
  times: boolean,
): Promise<{ agents: Map<string, Candidate>; renews: EtcdKeyValue[]; states: EtcdKeyValue[] }> {
  const k = f.keys;
  const from = Buffer.from(f.agentPrefix);
  const firstId = records[0]!.key.subarray(from.length);
  const lastId = records.at(-1)!.key.subarray(from.length);
  const ops = [span(k.termPrefix, firstId, lastId), ...(times ? [span(k.renewPrefix, firstId, lastId), span(k.statePrefix, firstId, lastId)] : [])];
  const r = await txn({ compare: [], success: ops, failure: [] });
  return { agents: snapshotAgents(k, f.agentPrefix, records, all(r.responses[0])), renews: all(r.responses[1]), states: all(r.responses[2]) };
}

/**
 * Every agent, a page of agent records at a time, each page's liveness keys (term, renewal,
 * state of `agent/<id>` for the ids from its first to its last) in one more read: one answer
 * with every agent passed gRPC's 4 MB limit at about 15,000 agents. An agent's row comes from
 * two reads a round trip apart, not one snapshot of the fleet: a listing, nothing decides on it.
 */
export async function listAgents(c: Ctx, txn: PageTxn, f: FleetKeys): Promise<AgentRow[]> {
  const k = f.keys;
  const from = Buffer.from(f.agentPrefix);
  const out: AgentRow[] = [];
  for await (const records of pages(txn, from, prefixEnd(from), 'Ascend')) {
    const p = await withLiveness(txn, f, records, true);
    const { rows } = await agentRows(c, [...p.agents.values()], byAgent(k, p.renews, k.renewPrefix), byAgent(k, p.states, k.statePrefix));
    for (const { deregisteredAtMs: _, ...row } of rows.values()) out.push(row);
  }
  return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * One page of ownership records after `req.after` (in the order of their keys, the
 * URI-encoded names), read again halved while over the answer limit; then each owner's record
 * and liveness keys, AGENTS_PER_TXN owners a Txn, and their leases' time to live: one agent's
 * keys are read once however many of the page's resources it owns.
 */
export async function listResources(c: Ctx, txn: PageTxn, f: FleetKeys, req: ResourcePageRequest): Promise<ResourcePage> {
  const k = f.keys;
  const prefix = Buffer.from(f.ownPrefix);
  const from = req.after === undefined ? prefix : Buffer.concat([prefix, Buffer.from(encodeURIComponent(req.after)), Buffer.from([0])]);
  const { kvs, more } = await page(txn, from, prefixEnd(prefix), 'Ascend', req.limit);
  const records = kvs.flatMap((kv) => {
    const resource = k.nameIn(kv.key, f.ownPrefix);
    const v = parseOwn(kv);
    return resource === null || v === null ? [] : [{ resource, kv, v }];
  });
  const ids = [...new Set(records.map((r) => r.v.agent))];
  const candidates: Candidate[] = [];
  const renews = new Map<string, EtcdKeyValue>();
  const states = new Map<string, EtcdKeyValue>();
  const chunks = Array.from({ length: Math.ceil(ids.length / AGENTS_PER_TXN) }, (_, i) => ids.slice(i * AGENTS_PER_TXN, (i + 1) * AGENTS_PER_TXN));
  await Promise.all(
    chunks.map(async (chunk) => {
      const ops = chunk.flatMap((id) => {
        const name = `${AGENT_LEASE_PREFIX}${id}`;
        return [rangeOf(Buffer.from(f.agentPrefix + encodeURIComponent(id))), rangeOf(k.term(name)), rangeOf(k.renew(name)), rangeOf(k.state(name))];
      });
      const r = await txn({ compare: [], success: ops, failure: [] });
      chunk.forEach((id, i) => {
        const kv = first(r.responses[4 * i]);
        const value = parseAgent(kv);
        if (kv !== undefined && value !== null) candidates.push({ id, kv, value, term: first(r.responses[4 * i + 1]) });
        const renew = first(r.responses[4 * i + 2]);
        const state = first(r.responses[4 * i + 3]);
        if (renew !== undefined) renews.set(id, renew);
        if (state !== undefined) states.set(id, state);
      });
    }),
  );
  const { now, rows: agents } = await agentRows(c, candidates, renews, states);
  const rows: OwnerRow[] = records.map(({ resource, kv, v }) => {
    const a = agents.get(v.agent);
    return {
      resource,
      agent: v.agent,
      generation: generationOf(kv, v),
      placedAtMs: v.placedAtMs,
      // Ownership that names an agent with no record: owned, and not by anyone alive.
      live: a?.live ?? false,
      deregistered: a?.deregistered ?? false,
      deregisteredAtMs: a?.deregisteredAtMs ?? null,
      heartbeatAgeMs: a?.heartbeatAgeMs ?? null,
      expiresInMs: a?.expiresInMs ?? null,
      storeNowMs: a?.storeNowMs ?? now,
    };
  });
  const last = kvs.at(-1);
  return { rows, next: more && last !== undefined ? k.nameIn(last.key, f.ownPrefix) : null };
}
