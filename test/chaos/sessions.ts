/**
 * The nemesis's hand on the server's side of a session (liveness 'session', docs/liveness.md
 * case 2): it ends the leader's session connection while the leader's process lives, as an
 * operator's pg_terminate_backend or KILL CONNECTION, a server-side timeout or a failover would.
 * The session is found from the lease row the store keeps (the backend pid or connection id the
 * term was tied to), on the run's own schema or database, so nothing but the run's own
 * sessions can be ended. No server is restarted.
 */
import { createRequire } from 'node:module';
import pg from 'pg';
import type { ChaosLiveness, StoreKind } from './types.js';

export interface SessionEnder {
  /** Ends the session the lease's current term is tied to; the id it ended, or null when no live term is tied to one. */
  end(lease: string): Promise<string | null>;
  describe: string;
}

interface MysqlConn {
  query(sql: string, values?: unknown[]): Promise<[unknown, unknown]>;
  end(): Promise<void>;
}

/** The ender for this store and mode, or why the kind cannot be injected here. */
export function sessionEnder(kind: StoreKind, storeUrl: string, liveness: ChaosLiveness): SessionEnder | { unsupported: string } {
  if (liveness !== 'session') return { unsupported: "the workers run liveness 'ttl': no term is tied to a session (--liveness session)" };
  if (kind === 'postgres') {
    const u = new URL(storeUrl);
    const schema = u.searchParams.get('schema') ?? 'leasehold';
    u.searchParams.delete('schema');
    return {
      describe: 'pg_terminate_backend of the term\'s recorded session backend',
      async end(lease) {
        const c = new pg.Client({ connectionString: u.toString() });
        await c.connect();
        try {
          const r = await c.query<{ pid: number | null; ok: boolean | null }>(
            `SELECT session_pid AS pid, pg_terminate_backend(session_pid) AS ok FROM "${schema}".leases
              WHERE name = $1 AND holder IS NOT NULL AND session_pid IS NOT NULL AND expires_at > now()`,
            [lease],
          );
          const row = r.rows[0];
          return row?.ok === true ? String(row.pid) : null;
        } finally {
          await c.end();
        }
      },
    };
  }
  if (kind === 'mysql') {
    const mysql = createRequire(import.meta.url)('mysql2/promise') as { createConnection(uri: string): Promise<MysqlConn> };
    return {
      describe: "KILL CONNECTION of the term's recorded session connection",
      async end(lease) {
        const c = await mysql.createConnection(storeUrl.replace(/^mariadb:/, 'mysql:'));
        try {
          // session_token = token: the recorded connection is this term's, not an earlier one's.
          const [rows] = (await c.query(
            'SELECT session_conn AS id FROM leasehold_leases WHERE name = ? AND holder IS NOT NULL AND session_token <=> token',
            [lease],
          )) as [Array<{ id: number | string | null }>, unknown];
          const id = rows[0]?.id;
          if (id === null || id === undefined) return null;
          await c.query(`KILL CONNECTION ${Number(id)}`);
          return String(id);
        } finally {
          await c.end();
        }
      },
    };
  }
  if (kind === 'sqlite') return { unsupported: "SQLite has no server: a live process's session (the process itself) cannot be ended by anyone but a kill" };
  return { unsupported: `liveness 'session' is refused on ${kind} (docs/liveness.md)` };
}
