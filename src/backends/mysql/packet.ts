/**
 * A batch's statements travel as one packet, and the server refuses a packet larger than its
 * `max_allowed_packet` (error 1153): 16 MiB by default on MariaDB 10.2+, 64 MiB on MySQL 8.
 * mysql2's `query` inlines every value client-side (no server-side prepared statement, so the
 * 65,535-placeholder limit never applies), and the inlined values dominate the size: a contender
 * repeats its name and holder id in several statements (./claim.ts), so 2,000 waiting contenders
 * with 200-character names and 512-character holder ids of 3-byte characters make about 80 MB of
 * SQL, while 2,000 with short names make 5 MB. A batch is therefore cut into parts by an upper
 * bound on its bytes, each part one round trip, rather than sent whole and refused
 * (test/unit/mysql-packet-bound.test.ts holds planClaim to the bound).
 */

/** Until a session has read the server's max_allowed_packet: MySQL 5.7's default, the smallest in use. */
export const DEFAULT_MAX_PACKET = 4 * 1024 * 1024;

/** Room for what the bounds below leave out (the statements' fixed text is counted per request). */
const MARGIN = 0.75;

const bytes = (s: string): number => Buffer.byteLength(s, 'utf8');

/**
 * At most the bytes a claim request adds to its batch once inlined: every byte of a value may be
 * escaped (doubled), and a renewal's values are inside a JSON string that is escaped twice
 * (JSON, then SQL: a quote becomes four bytes, a control character up to seven).
 */
export function claimRequestBytes(r: { name: string; holder: string; expect: readonly string[] | null; nextNonce: string; handoff?: readonly string[] }): number {
  const name = bytes(r.name);
  const holder = bytes(r.holder);
  const nonces = bytes(r.nextNonce) + (r.expect ?? []).reduce((n, x) => n + bytes(x) + 1, 0) + (r.handoff ?? []).reduce((n, x) => n + bytes(x) + 1, 0);
  // Contender, at its largest (waiting, so it accepts a handed term and registers, with liveness
  // 'session'): about 3,600 bytes of statement text and 40 values, its name in 11 places (the
  // session lock's name holds it too), its holder id in 10, and its nonces in 5.
  if (r.expect === null) return 6000 + 2 * (11 * name + 10 * holder + 5 * nonces);
  // Renewal: one JSON entry (name, holder, nonces, TTL) and its name in the read-back's IN list.
  return 100 + 7 * (name + holder + nonces) + 2 * name;
}

/**
 * At most the bytes one acceptance adds to planAccept's batch (./claim.ts): one JSON entry (name,
 * holder, nonces, TTL) escaped twice, as a renewal's, and its name in two `IN` lists.
 */
export function acceptRequestBytes(r: { name: string; holder: string; nextNonce: string; handoff?: readonly string[] }): number {
  const nonces = bytes(r.nextNonce) + (r.handoff ?? []).reduce((n, x) => n + bytes(x) + 1, 0);
  return 100 + 7 * (bytes(r.name) + bytes(r.holder) + nonces) + 4 * bytes(r.name);
}

/** At most the bytes one release adds to a releaseMany (./release.ts): its name in 5 places, holder and nonces in 2. */
export function releaseRequestBytes(r: { name: string; holder: string; expect: readonly string[] }): number {
  return 2500 + 2 * (5 * bytes(r.name) + 2 * bytes(r.holder) + 2 * r.expect.reduce((n, x) => n + bytes(x) + 1, 0));
}

/** `items` in order, cut into runs whose bounds add up to at most the packet budget (at least one item each). */
export function splitByPacket<T>(items: readonly T[], size: (item: T) => number, maxPacket: number): T[][] {
  const budget = maxPacket * MARGIN;
  const parts: T[][] = [];
  let part: T[] = [];
  let used = 0;
  for (const item of items) {
    const n = size(item);
    if (part.length > 0 && used + n > budget) {
      parts.push(part);
      part = [];
      used = 0;
    }
    part.push(item);
    used += n;
  }
  if (part.length > 0) parts.push(part);
  return parts;
}

/**
 * At most the bytes `sql` with `values` inlined takes (mysql2 inlines them client-side): every
 * byte of a string may be escaped, a buffer is written as hex, anything else is short.
 */
export function inlinedBound(sql: string, values: unknown): number {
  const of = (v: unknown): number => {
    if (typeof v === 'string') return 2 * bytes(v) + 2;
    if (Buffer.isBuffer(v)) return 2 * v.length + 3;
    if (Array.isArray(v)) return v.reduce((n: number, x) => n + of(x) + 2, 2);
    if (v !== null && typeof v === 'object' && !(v instanceof Date)) return 2 * bytes(JSON.stringify(v) ?? '') + 2;
    return 40;
  };
  return bytes(sql) + (values === undefined ? 0 : of(values));
}
