/** One server-side batch with the store's rollback, retry and abort rules, shared by the store, the fleet and the slot ledger. */
import { performance } from 'node:perf_hooks';
import { AbortedError } from '../../core/errors.js';
import type { CallOptions } from '../../core/port.js';
import { run } from './driver.js';
import { isRetryableLockError, mapMysqlError } from './errors.js';
import type { MysqlStore } from './store.js';

/** How long a call keeps retrying deadlocks and lock-wait timeouts, as the store's own calls do. */
export const LOCK_RETRY_BUDGET_MS = 5000;

/** One round trip of a batch: several `;`-separated statements and their values. */
interface BatchPart {
  sql: string;
  values: unknown[];
}

/**
 * Runs one batch on a connection of `store`'s pool and returns its results. A batch too large for
 * one packet may be given as parts of several statements each, sent one after another on the
 * same connection (one transaction may span them) and answered with the results of all, in order. A batch that failed
 * part-way may leave its transaction open on the connection: it is rolled back before the
 * connection goes back (a process frozen at that moment loses the session to MariaDB's
 * idle_transaction_timeout, set on every session of the store). Deadlocks and lock-wait timeouts
 * run the batch again. An abort kills the statement in progress (a lock wait included); a batch
 * that committed before the kill has landed, and its answer is returned.
 * `make(retry)` gives the batch; `retry` is true when an earlier attempt was rolled back.
 * @internal the store's claims, the fleet's and the slot ledger's batches.
 */
export async function runBatch(
  store: MysqlStore,
  make: string | ((retry: boolean) => BatchPart | BatchPart[]),
  values: unknown[],
  options?: CallOptions,
): Promise<unknown[]> {
  const started = performance.now();
  const signal = options?.signal;
  // A function, not a field read: TypeScript would keep the narrowing of the first check.
  const aborted = (): boolean => signal?.aborted === true;
  for (let attempt = 0; ; attempt++) {
    if (aborted()) throw new AbortedError('the call was aborted before it ran');
    const batch = typeof make === 'string' ? { sql: make, values } : make(attempt > 0);
    const parts = Array.isArray(batch) ? batch : [batch];
    let conn;
    try {
      conn = await store.connector.connection();
    } catch (err) {
      throw mapMysqlError(err, store.database);
    }
    const threadId = (conn as { threadId?: unknown }).threadId;
    const kill = (): void => {
      if (typeof threadId === 'number') void store.connector.query(`KILL QUERY ${threadId}`).catch(() => {});
    };
    signal?.addEventListener('abort', kill, { once: true });
    try {
      const r: unknown[] = [];
      for (const [i, part] of parts.entries()) {
        // An abort between parts has no statement to KILL: stop here. With an errno the session
        // counts as intact, so the catch below rolls the transaction back and keeps the connection.
        if (i > 0 && aborted()) throw Object.assign(new Error('aborted between the parts of a batch'), { errno: 0 });
        await store.connector.fits(conn, part.sql, part.values);
        const one = (await run(conn, part.sql, part.values, store.connector.timeoutMs)) as unknown[];
        if (parts.length === 1) return release(conn, one);
        r.push(...one);
      }
      return release(conn, r);
    } catch (err) {
      const fatal = (err as { fatal?: boolean }).fatal === true || typeof (err as { errno?: unknown }).errno !== 'number';
      if (fatal) {
        conn.destroy();
        store.connector.failed(err);
        throw mapMysqlError(err, store.database);
      }
      const rolledBack = await run(conn, 'ROLLBACK', undefined, store.connector.timeoutMs).then(
        () => true,
        () => false,
      );
      if (rolledBack) conn.release();
      else conn.destroy();
      if (aborted()) throw new AbortedError('the call was aborted; it was rolled back and has not landed', { cause: err });
      if (!isRetryableLockError(err) || performance.now() - started > LOCK_RETRY_BUDGET_MS) throw mapMysqlError(err, store.database);
      store.lockRetries++;
      await new Promise((r) => setTimeout(r, Math.min(200, 5 * 2 ** attempt) * Math.random()));
    } finally {
      signal?.removeEventListener('abort', kill);
    }
  }
}

function release<R>(conn: { release(): void }, r: R): R {
  conn.release();
  return r;
}
