import type { EtcdKeyValue } from './client.js';
import type { HistoryEvent } from '../store.js';

/**
 * The key layout, under one prefix (default `leasehold`). Lease names are URI-encoded in keys,
 * so a name containing `/` cannot reach into another name's keys.
 *
 *   {p}/schema-version          "2"; every transaction compares it (SchemaError when absent or newer).
 *                               2: sessions (session.ts): every delete of a term key by anyone but
 *                               its session must mark it, which a version-1 process does not do,
 *                               so version-1 processes are shut out (SchemaError) once migrated.
 *   {p}/term/{name}             the live term: JSON [holder, nonce], or [holder, nonce, 's'] once
 *                               its holder's session renews it, attached to an etcd lease. Its
 *                               create revision IS the fencing token. Deleted by etcd when the
 *                               lease runs out (expiry), by release, by revoke, by a clone
 *                               conflict (claim.ts, session.ts), and by a session's sweep of a
 *                               term nobody renews any more (session.ts).
 *   {p}/state/{name}            no lease: who began the last term, when, and how it ended
 *                               (released/revoked/conflict). Outlives the term, like the
 *                               Postgres row; `endedBy: 'conflict'` is what tells the other
 *                               clone's next renewal 'cloned' once the term key is gone.
 *   {p}/renew/{name}            no lease: the nonce and times of the last renewal that wrote the
 *                               term key (the acquisition, and the renewal that moved the term
 *                               onto its holder's session: session.ts).
 *   {p}/session/{leaseId}       a holder's session (session.ts): JSON {h, n, at}, on the etcd
 *                               lease every term the session renews is attached to. Each tick
 *                               compares and swaps n; a clone of the process fails the swap.
 *   {p}/ended/{leaseId}/{name}  on that same etcd lease: "this term key was deleted by someone
 *                               other than the session" (release, revoke, a clone conflict),
 *                               read by the session's next tick instead of checking every term.
 *   {p}/history/{name}/{id}     one key per change of holder, written in the same transaction.
 *   {p}/token-floor             optional (migrate --min-token): added to every create revision,
 *                               so tokens are revision + floor. Every transaction compares its
 *                               mod revision, so no process issues a token under an old floor.
 *   {p}/fleet/...               the fleet registry (fleet.ts); {p}/slots/... the slot ledger (slots.ts).
 *   {p}/restore/ack             optional (migrate --min-token): the revision-over-raft-index gap
 *                               an operator accepted (restore.ts); decimal.
 *   {p}/restore/rewound         optional: JSON {seen, found, atMs}, left by a process that saw
 *                               etcd's revision go back; no grants until migrate deletes it.
 */

/**
 * Every name directly under `{p}/`: the layout above, with the fleet registry's `{p}/fleet/`
 * (fleet.ts) and the slot ledger's `{p}/slots/` (slots.ts). A key of one store must never lie
 * inside another's: a prefix with one of these as a later segment (`nest/term`) would lie
 * inside the store at the part before it (`nest`), whose range reads, watch and range deletes
 * (`migrate --min-token` deletes every `{p}/term/` key) would reach it, so validatePrefix
 * refuses it (see checkPrefixSegments). Any other two prefixes are the same store or disjoint:
 * every key of `a` starts `a/` followed by one of these names, and for two different prefixes
 * `a/` and `b/` to share a key one must start with the other. Adding a name here is a change
 * of the prefix rule: it refuses prefixes it accepted before.
 */
export const ETCD_SUBSPACES = ['schema-version', 'token-floor', 'term', 'state', 'renew', 'session', 'ended', 'history', 'fleet', 'slots', 'restore'] as const;

/**
 * The first segment after the first that names a sub-space (a prefix that would lie inside the
 * store at the segments before it), or undefined. The first segment may be anything: no other
 * prefix has keys starting with it and a slash unless it is that prefix or nested in it.
 */
export function nestingSegment(prefix: string): { segment: string; outer: string } | undefined {
  const segments = prefix.split('/');
  for (let i = 1; i < segments.length; i++) {
    const s = segments[i]!;
    if ((ETCD_SUBSPACES as readonly string[]).includes(s)) return { segment: s, outer: segments.slice(0, i).join('/') };
  }
  return undefined;
}

/** Bump when the layout changes incompatibly. `leasehold doctor` compares it. */
export const SCHEMA_VERSION = 2;

export class EtcdKeys {
  readonly prefix: string;
  readonly version: Buffer;
  readonly termPrefix: string;
  readonly statePrefix: string;
  readonly renewPrefix: string;
  readonly historyPrefix: string;
  readonly sessionPrefix: string;
  readonly endedPrefix: string;
  /** The fleet registry's keys (fleet.ts) and the slot ledger's (slots.ts). */
  readonly fleetPrefix: string;
  readonly slotsPrefix: string;
  readonly floorKey: Buffer;
  readonly restorePrefix: string;
  readonly restoreAck: Buffer;
  readonly restoreRewound: Buffer;
  /** The token floor this process last read, and the floor key's mod revision then ('0': absent). */
  floor = 0n;
  floorRev = '0';
  floorLoaded = false;

  constructor(prefix: string) {
    this.prefix = prefix;
    this.version = Buffer.from(`${prefix}/schema-version`);
    this.termPrefix = `${prefix}/term/`;
    this.statePrefix = `${prefix}/state/`;
    this.renewPrefix = `${prefix}/renew/`;
    this.historyPrefix = `${prefix}/history/`;
    this.sessionPrefix = `${prefix}/session/`;
    this.endedPrefix = `${prefix}/ended/`;
    this.fleetPrefix = `${prefix}/fleet/`;
    this.slotsPrefix = `${prefix}/slots/`;
    this.floorKey = Buffer.from(`${prefix}/token-floor`);
    this.restorePrefix = `${prefix}/restore/`;
    this.restoreAck = Buffer.from(`${prefix}/restore/ack`);
    this.restoreRewound = Buffer.from(`${prefix}/restore/rewound`);
  }

  /** A term's fencing token: its key's create revision plus the floor. */
  token(revision: string | number | bigint): bigint {
    return BigInt(revision) + this.floor;
  }

  /** Adopts the floor key as read (undefined: absent). */
  setFloor(kv: EtcdKeyValue | undefined): void {
    this.floor = kv === undefined ? 0n : BigInt(kv.value.toString());
    this.floorRev = kv === undefined ? '0' : String(kv.mod_revision);
    this.floorLoaded = true;
  }

  term(name: string): Buffer {
    return Buffer.from(this.termPrefix + encodeURIComponent(name));
  }
  state(name: string): Buffer {
    return Buffer.from(this.statePrefix + encodeURIComponent(name));
  }
  renew(name: string): Buffer {
    return Buffer.from(this.renewPrefix + encodeURIComponent(name));
  }
  history(name: string, id: string): Buffer {
    return Buffer.from(`${this.historyPrefix}${encodeURIComponent(name)}/${id}`);
  }
  session(leaseId: string): Buffer {
    return Buffer.from(this.sessionPrefix + leaseId);
  }
  /** Where the deletes of terms on etcd lease `leaseId` are marked for its session (one prefix per lease). */
  endedOf(leaseId: string): string {
    return `${this.endedPrefix}${leaseId}/`;
  }
  ended(leaseId: string, name: string): Buffer {
    return Buffer.from(this.endedOf(leaseId) + encodeURIComponent(name));
  }
  historyOf(name: string | undefined): Buffer {
    return Buffer.from(name === undefined ? this.historyPrefix : `${this.historyPrefix}${encodeURIComponent(name)}/`);
  }

  /** The lease name in a `{p}/term/...`, `{p}/state/...` or `{p}/renew/...` key. */
  nameIn(key: Buffer, prefix: string): string | null {
    const k = key.toString();
    if (!k.startsWith(prefix)) return null;
    try {
      return decodeURIComponent(k.slice(prefix.length));
    } catch {
      return null;
    }
  }
}

/** etcd's range_end for "every key starting with prefix": the prefix with its last byte + 1. */
export function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i] = end[i]! + 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}

/**
 * The term key's value. Deterministic, because renewal compares it byte for byte: holder ids
 * and nonces are compared exactly, with no parsing on the etcd side.
 */
export function termValue(holder: string, nonce: string): Buffer {
  return Buffer.from(JSON.stringify([holder, nonce]));
}

/**
 * A term renewed by its holder's session (session.ts): [holder, nonce, 's']. A renewal compares
 * the two-element value, so no renewal outside the session ever matches a session's term.
 */
export function sessionTermValue(holder: string, nonce: string): Buffer {
  return Buffer.from(JSON.stringify([holder, nonce, 's']));
}

export function parseTerm(kv: EtcdKeyValue | undefined): { holder: string; nonce: string; session: boolean } | null {
  if (kv === undefined) return null;
  try {
    const v = JSON.parse(kv.value.toString()) as unknown;
    if (Array.isArray(v) && typeof v[0] === 'string' && typeof v[1] === 'string') return { holder: v[0], nonce: v[1], session: v[2] === 's' };
  } catch {
    // not ours
  }
  return null;
}

export interface StateValue {
  /** Who began the last term (kept after it ends, for list() and 'takeover' history). */
  holder: string;
  /** Decimal; absent when written by the acquisition itself, whose token is then this key's mod revision. */
  token?: string;
  startedAtMs: number;
  /** How the term ended, when it did not simply run out. 'conflict': two clones renewed it (store.ts, 4b). */
  endedBy?: 'released' | 'revoked' | 'conflict';
  endedAtMs?: number;
  /** The ended term's last nonce, and an id of the release/revoke write (recognises a retried write; unset for a conflict). */
  nonce?: string;
  endedId?: string;
}

export function parseState(kv: EtcdKeyValue | undefined): StateValue | null {
  if (kv === undefined) return null;
  try {
    const v = JSON.parse(kv.value.toString()) as StateValue;
    return typeof v === 'object' && v !== null && typeof v.holder === 'string' ? v : null;
  } catch {
    return null;
  }
}

/** The last token issued for a name, from its state key (a revision, or a token written whole). */
export function stateToken(kv: EtcdKeyValue, state: StateValue, keys: EtcdKeys): bigint {
  return state.token !== undefined ? BigInt(state.token) : keys.token(kv.mod_revision!);
}

export interface RenewValue {
  nonce: string;
  renewedAtMs: number;
  /** By the writer's clock; a lower bound of etcd's own expiry (see claim.ts). */
  expiresAtMs: number;
}

export function parseRenew(kv: EtcdKeyValue | undefined): RenewValue | null {
  if (kv === undefined) return null;
  try {
    const v = JSON.parse(kv.value.toString()) as RenewValue;
    return typeof v === 'object' && v !== null && typeof v.nonce === 'string' ? v : null;
  } catch {
    return null;
  }
}

export interface SessionValue {
  /** Holder id. */
  h: string;
  /** Swapped on every tick: a tick that finds a value it never wrote is a clone's. */
  n: string;
  /** The tick's local time: list()'s renewedAtMs for every term on the session. */
  at: number;
}

export function parseSession(kv: EtcdKeyValue | undefined): SessionValue | null {
  if (kv === undefined) return null;
  try {
    const v = JSON.parse(kv.value.toString()) as SessionValue;
    return typeof v === 'object' && v !== null && typeof v.h === 'string' && typeof v.n === 'string' && typeof v.at === 'number' ? v : null;
  } catch {
    return null;
  }
}

export interface HistoryValue {
  name: string;
  event: HistoryEvent;
  holder: string | null;
  previousHolder: string | null;
  /** Absent for acquisitions: the token is then this key's create revision (same transaction as the term key). */
  token?: string;
  atMs: number;
  detail: string | null;
  /** Position within its transaction: entries written together share one etcd revision. */
  seq: number;
}

export function json(v: unknown): Buffer {
  return Buffer.from(JSON.stringify(v));
}
