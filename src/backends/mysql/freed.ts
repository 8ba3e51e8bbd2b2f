/**
 * "This lease may be free", without polling, on a server with no LISTEN/NOTIFY: named locks.
 *
 * While a process holds a lease it also holds the MySQL named lock of that lease (GET_LOCK), on
 * one connection of its own. A process that was told 'busy' waits for that lock on a connection
 * per lease (GET_LOCK with a long timeout, which costs the server nothing while it waits). A
 * release lets the lock go after the release committed; a holder that dies closes its
 * connection and the server lets it go. Either way the waiter's GET_LOCK returns at once, it lets
 * the lock go again (it only wanted to hear about it) and tells the engine, which claims. The
 * lock is a doorbell, never a lease: what the claim answers decides, and a lock held or missed
 * changes nothing but how soon a follower looks.
 *
 * A frozen or partitioned holder keeps its lock while its term runs out: followers then re-check
 * at the store-reported expiry, as they would with no channel at all (the engine keeps that
 * timer). A waiter that gets the lock at once cannot tell a release it was too late to wait for
 * from a new holder that has not taken the lock yet: it asks for a claim, and again after 100ms,
 * 300ms, 1s and 3s while the lock stays free, then leaves the lease to the expiry timer.
 */
import { createHash } from 'node:crypto';
import type { ClaimRequest, FreedListener } from '../../core/port.js';
import type { MysqlConnector } from './driver.js';

interface LockConnection {
  query(options: { sql: string; values?: unknown; timeout?: number }, cb: (err: Error | null, result?: unknown) => void): unknown;
  on(event: 'error' | 'end', listener: (err?: Error) => void): unknown;
  destroy(): void;
  end(cb?: () => void): void;
}

/** How long one wait lasts before it is asked again: idle followers cost one request per this. */
const WAIT_S = 30;
/** A wait that returned this fast found the lock free: nobody let it go. */
const HEARD_MS = 40;
/** After an empty wait: when to look again, then give up until the next 'busy'. */
const EMPTY_RETRY_MS = [100, 300, 1000, 3000];
/** Leases one process waits on through locks at once; more wait on their expiry timers. */
const MAX_FOLLOWED = 16;
/** The shortest time between two claims one name's doorbell asks for. */
const HEARD_GAP_MS = 500;
/** How long the holding connection stays open once this process holds nothing (closeIdleHolding). */
const HOLDING_LINGER_MS = 1000;
/**
 * How long a wait connection whose wait ended (its doorbell rang) stays open for the next wait,
 * and how many do: a follower that lost the race to another follower, or a process that soon
 * follows again (a handover back and forth), then waits at once instead of after a connect, a
 * login and a round trip, which on a loaded server took longer than the release it was to hear.
 */
const SPARE_LINGER_MS = 1000;
const MAX_SPARE = 4;
/** A claim this soon after its name's doorbell rang is taken as the answer to it ({@link FreedChannel.rang}). */
const RANG_MS = 2000;

/** The named lock of a lease: at most 64 characters, so a hash of the database and the name. */
function lockName(database: string, lease: string): string {
  return `leasehold:${createHash('sha256').update(database).update('\0').update(lease).digest('base64url').slice(0, 40)}`;
}

function q(c: LockConnection, sql: string, values: unknown[], timeoutMs?: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    c.query({ sql, values, ...(timeoutMs === undefined ? {} : { timeout: timeoutMs }) }, (err, r) => (err === null ? resolve(r) : reject(err)));
  });
}

/** One lease followed: its wait connection, and whether a GET_LOCK is in flight on it. */
interface Following {
  conn: LockConnection | undefined;
  waiting: boolean;
  stop: boolean;
  armedAt: number;
  empty: number;
}

export class FreedChannel {
  /** Lease names this process holds; of them, those whose locks it has, and is taking. */
  private readonly held = new Set<string>();
  private readonly locked = new Set<string>();
  private readonly taking = new Set<string>();
  private holding: LockConnection | undefined;
  private holdingUp: Promise<LockConnection> | undefined;
  private readonly followed = new Map<string, Following>();
  private listener: FreedListener | undefined;
  private readonly lastHeard = new Map<string, number>();
  /** Names whose doorbell rang and whose claim has not been sent yet: when it rang. */
  private readonly ringing = new Map<string, number>();
  private onReconnect: (() => void) | undefined;
  private closed = false;
  /** Wait connections between waits, holding no lock (SPARE_LINGER_MS), each with the host it is on. */
  private readonly spare: { conn: LockConnection; host: string; timer: NodeJS.Timeout }[] = [];

  constructor(
    /** The store's connections: a lock connection goes to the host its pool uses now. */
    private readonly connector: Pick<MysqlConnector, 'current' | 'connect' | 'target'>,
    /** The store's session setup (driver.ts, sessionSetupSql): a release runs on the holding connection. */
    private readonly sessionSql: string,
  ) {}

  private get target(): MysqlConnector['target'] {
    return this.connector.target;
  }

  private host(): string {
    return this.connector.current;
  }

  private connect(): LockConnection {
    const c = this.connector.connect<LockConnection>(this.host());
    // An error on an idle lock connection must not crash the process; its users see the end.
    c.on('error', () => this.dropSpare(c));
    c.on('end', () => this.dropSpare(c));
    return c;
  }

  // ---- the holder's side ------------------------------------------------------------------

  /**
   * Called after this process acquired or renewed `name`: takes its lock unless it has it. A
   * follower may hold the lock for an instant (it lets it go at once) and a frozen old holder for
   * longer: a try that fails is tried again at the next renewal.
   */
  hold(name: string): void {
    if (this.closed) return;
    this.held.add(name);
    if (this.locked.has(name) || this.taking.has(name)) return;
    this.taking.add(name);
    // After the claim's answer reaches the engine: opening the holding connection costs a few
    // hundred microseconds of this thread, which a woken follower's handover would otherwise wait
    // for. take() lets the lock go again if the lease was released meanwhile.
    setImmediate(() => {
      void this.take(name).finally(() => {
        this.taking.delete(name);
        this.closeIdleHolding();
      });
    });
  }

  private async holdingConnection(): Promise<LockConnection> {
    if (this.holding !== undefined) return this.holding;
    this.holdingUp ??= (async () => {
      const c = this.connect();
      // Idle for as long as a term lasts; the server must not close it for that.
      await q(c, `SET SESSION wait_timeout = 31536000; ${this.sessionSql}`, []);
      c.on('end', () => this.lostHolding(c));
      c.on('error', () => this.lostHolding(c));
      this.holding = c;
      return c;
    })().finally(() => {
      this.holdingUp = undefined;
    });
    return this.holdingUp;
  }

  /**
   * The holding connection dropped, and its locks with it: the next renewals take them again.
   * An operator's revocation (or `migrate --min-token`) kills this connection on purpose (see
   * {@link knockTargets}): so every lease held here is re-checked now, as a notification of its
   * name asks the engine to, rather than at its next scheduled renewal.
   */
  private lostHolding(c: LockConnection): void {
    if (this.holding !== c) return;
    this.holding = undefined;
    this.locked.clear();
    if (this.closed) return;
    for (const name of this.held) this.listener?.(name);
  }

  /** Statements in flight on the holding connection: a release runs there only when there are none. */
  private holdingBusy = 0;

  private async onHolding<R>(c: LockConnection, f: () => Promise<R>): Promise<R> {
    this.holdingBusy++;
    try {
      return await f();
    } finally {
      this.holdingBusy--;
    }
  }

  /**
   * A holder's release, on the connection that holds the lease's lock, with the lock let go in
   * the same round trip. `sql` is the release's transaction, without its COMMIT: the lock goes
   * right after the commit, in the same batch, so the waiter wakes without a round trip more.
   * Not before it: InnoDB lets a committing transaction's row locks go before its redo log is
   * flushed (measured here: a reader blocked on the row woke 1-2 ms into a 10-15 ms COMMIT), so
   * a follower woken before the COMMIT could read, and hold, a handed term that a crash in the
   * flush would lose while it held it. Undefined when that connection holds no lock for
   * `name` or is busy (taking another lease's lock can wait up to 2s): the caller runs the
   * release on the pool, then {@link unhold}. Rejects when it failed, rolled back if it could
   * be; with the connection gone, whether it committed is unknown.
   */
  async releaseHere(name: string, sql: string, values: unknown[]): Promise<{ prev: string | null } | undefined> {
    const c = this.holding;
    if (c === undefined || !this.locked.has(name) || this.holdingBusy > 0) return undefined;
    const lock = lockName(this.target.database, name);
    const r = await this.onHolding(c, async () => {
      try {
        return (await q(c, `${sql};\nCOMMIT;\nDO RELEASE_LOCK(?);\nSELECT @lh_prev AS prev`, [...values, lock], 10_000)) as unknown[];
      } catch (err) {
        await q(c, 'ROLLBACK', [], 5000).catch(() => c.destroy());
        throw err;
      }
    });
    this.held.delete(name);
    this.locked.delete(name);
    this.closeIdleHolding();
    return (r[r.length - 1] as { prev: string | null }[])[0]!;
  }

  private async take(name: string): Promise<void> {
    try {
      const c = await this.holdingConnection();
      const lock = lockName(this.target.database, name);
      // A waiter holds the lock for an instant when it wakes: queue behind it briefly rather than
      // fail, or waiters would wake one another, each taking it as a release, until the next renewal.
      const r = (await this.onHolding(c, () => q(c, 'SELECT GET_LOCK(?, 2) AS ok', [lock], 5000))) as { ok: number | null }[];
      if (Number(r[0]?.ok) !== 1) return;
      // Released while the lock was being taken: let it go again.
      if (!this.held.has(name)) await this.onHolding(c, () => q(c, 'DO RELEASE_LOCK(?)', [lock], 5000));
      else this.locked.add(name);
    } catch {
      // No lock: followers wait on their expiry timers for this term. Nothing else depends on it.
    }
  }

  /**
   * Called after this process released or lost `name`: lets its lock go, waking the waiters.
   * The last lease let go closes the holding connection too: it is idle until the next term and
   * would otherwise keep the process alive (its wait_timeout is a year) after everything was
   * released, even with the store left open.
   */
  async unhold(name: string): Promise<void> {
    this.held.delete(name);
    const c = this.holding;
    if (this.locked.delete(name) && c !== undefined) await this.onHolding(c, () => q(c, 'DO RELEASE_LOCK(?)', [lockName(this.target.database, name)], 5000)).catch(() => {});
    this.closeIdleHolding();
  }

  /**
   * {@link unhold} for a batch release: the locks go in one statement per 500 names rather than
   * one round trip each on the one holding connection (a process closing with 1,000 leases would
   * otherwise queue 1,000 statements there before the last follower heard).
   */
  async unholdMany(names: readonly string[]): Promise<void> {
    const locks: string[] = [];
    for (const name of names) {
      this.held.delete(name);
      if (this.locked.delete(name)) locks.push(lockName(this.target.database, name));
    }
    const c = this.holding;
    if (c !== undefined) {
      for (let i = 0; i < locks.length; i += 500) {
        const part = locks.slice(i, i + 500);
        await this.onHolding(c, () => q(c, `DO ${part.map(() => 'RELEASE_LOCK(?)').join(', ')}`, part, 5000)).catch(() => {});
      }
    }
    this.closeIdleHolding();
  }

  private lingering: NodeJS.Timeout | undefined;

  /**
   * With nothing held, the holding connection closes after HOLDING_LINGER_MS: a process that
   * releases and soon acquires again (a handover back and forth, a leader stepping down and
   * re-elected) then takes its next lock on a connection already open, instead of waiting for a
   * connect, a login and the session setup while followers find the lock free.
   */
  private closeIdleHolding(): void {
    if (this.holding === undefined || this.held.size > 0 || this.locked.size > 0 || this.taking.size > 0) return;
    clearTimeout(this.lingering);
    this.lingering = setTimeout(() => {
      this.lingering = undefined;
      const c = this.holding;
      if (c === undefined || this.held.size > 0 || this.locked.size > 0 || this.taking.size > 0) return;
      this.holding = undefined;
      c.end(() => {});
    }, HOLDING_LINGER_MS).unref();
  }

  // ---- the followers' side ----------------------------------------------------------------

  watch(listener: FreedListener, onReconnect?: () => void): () => Promise<void> {
    this.listener = listener;
    this.onReconnect = onReconnect;
    return async () => {
      this.listener = undefined;
      this.onReconnect = undefined;
      for (const name of [...this.followed.keys()]) this.unfollow(name);
    };
  }

  private ring(name: string): void {
    this.ringing.set(name, performance.now());
    if (this.ringing.size > 1000) this.ringing.clear();
    this.listener?.(name);
  }

  /**
   * Whether a claim is a woken waiter's: every request a contender registered as its lease's
   * waiter (non-empty handoff) whose doorbell rang just now. Each ring answers one claim.
   */
  rang(requests: readonly ClaimRequest[]): boolean {
    if (this.ringing.size === 0) return false;
    const now = performance.now();
    const ok = requests.every((r) => r.expect === null && r.handoff !== undefined && r.handoff.length > 0 && now - (this.ringing.get(r.name) ?? -Infinity) < RANG_MS);
    for (const r of requests) this.ringing.delete(r.name);
    return ok;
  }

  /** Called after a claim of `name` answered 'busy': wait for its holder's lock, if watching. */
  follow(name: string): void {
    if (this.closed || this.listener === undefined) return;
    const f = this.followed.get(name);
    if (f !== undefined) {
      f.armedAt = performance.now();
      return;
    }
    if (this.followed.size >= MAX_FOLLOWED) return;
    const entry: Following = { conn: undefined, waiting: false, stop: false, armedAt: performance.now(), empty: 0 };
    this.followed.set(name, entry);
    void this.waitLoop(name, entry);
  }

  /** This process holds `name` now, or stopped wanting it. */
  unfollow(name: string): void {
    const f = this.followed.get(name);
    if (f === undefined) return;
    this.followed.delete(name);
    f.stop = true;
    // A wait in flight ends only with its connection; between waits the connection holds no lock
    // (a woken wait lets the lock go before the next statement) and serves the next follow.
    if (f.waiting) f.conn?.destroy();
    else if (f.conn !== undefined) this.retire(f.conn);
    f.conn = undefined;
  }

  /** Keeps a wait connection that holds no lock for the next wait (SPARE_LINGER_MS), or closes it. */
  private retire(conn: LockConnection): void {
    if (this.closed || this.spare.length >= MAX_SPARE) {
      conn.end(() => {});
      return;
    }
    const timer = setTimeout(() => {
      this.dropSpare(conn);
      conn.end(() => {});
    }, SPARE_LINGER_MS).unref();
    this.spare.push({ conn, host: this.host(), timer });
  }

  /** A spare wait connection to the host the store uses now, if there is one. */
  private takeSpare(): LockConnection | undefined {
    const host = this.host();
    for (;;) {
      const s = this.spare.pop();
      if (s === undefined) return undefined;
      clearTimeout(s.timer);
      if (s.host === host) return s.conn;
      s.conn.destroy();
    }
  }

  private dropSpare(conn: LockConnection): void {
    const i = this.spare.findIndex((s) => s.conn === conn);
    if (i < 0) return;
    clearTimeout(this.spare[i]!.timer);
    this.spare.splice(i, 1);
  }

  private async waitLoop(name: string, f: Following): Promise<void> {
    const lock = lockName(this.target.database, name);
    let failures = 0;
    while (!f.stop && !this.closed) {
      try {
        if (f.conn === undefined) f.conn = this.takeSpare();
        if (f.conn === undefined) {
          f.conn = this.connect();
          await q(f.conn, 'DO 1', []);
          if (failures > 0) this.onReconnect?.();
          failures = 0;
          // Unfollowed while connecting: the connection went to the spares.
          if (f.stop) break;
        }
        const t0 = performance.now();
        f.waiting = true;
        const r = (await q(f.conn, 'SELECT GET_LOCK(?, ?) AS ok', [lock, WAIT_S])) as { ok: number | null }[];
        f.waiting = false;
        if (f.stop) break;
        if (Number(r[0]?.ok) !== 1) {
          // A whole wait with the lock held: a long term. Still wanted if a claim said busy lately.
          if (performance.now() - f.armedAt > 2 * WAIT_S * 1000) break;
          continue;
        }
        // Sent now, awaited after the listener: the engine's claim need not wait a round trip for it.
        const letGo = q(f.conn, 'DO RELEASE_LOCK(?)', [lock]);
        letGo.catch(() => {});
        if (performance.now() - t0 >= HEARD_MS) {
          f.empty = 0;
          // Another waiter's own wake-up also lets the lock go: at most one claim per name per
          // HEARD_GAP_MS from this doorbell, however the waiters wake one another.
          const last = this.lastHeard.get(name) ?? -Infinity;
          if (performance.now() - last < HEARD_GAP_MS) {
            await letGo;
            await new Promise((res) => setTimeout(res, HEARD_GAP_MS).unref());
            continue;
          }
          this.lastHeard.set(name, performance.now());
          if (this.lastHeard.size > 1000) this.lastHeard.clear();
          this.ring(name);
          await letGo;
          // Until a claim answers busy again, nothing to wait for.
          break;
        }
        // The lock was free at once (or soon): either the holder let it go before this wait
        // began (a release between the 'busy' answer and here, which must not be missed, or one
        // that came within HEARD_MS) or a new holder has not taken it yet. A claim tells the two
        // apart, sent before the lock is let go, as above: a release that handed this process the
        // term is answered a round trip sooner. The waits between such claims grow, and this
        // entry stays (a 'busy' answer meanwhile does not start a new one).
        if (f.empty >= EMPTY_RETRY_MS.length) {
          // Stop following, but let the engine look once more first: its last claim may have
          // registered it as the lease's waiter (migration 6), and a term handed to it after
          // this loop ends would ring no doorbell; it would sit unseen, the lease held by nobody
          // who knows it, until its offer lapsed (schema 10; a whole TTL before). A 'busy' answer to this look follows again.
          this.ring(name);
          await letGo;
          break;
        }
        this.ring(name);
        await letGo;
        await new Promise((res) => setTimeout(res, EMPTY_RETRY_MS[f.empty++]).unref());
      } catch {
        f.waiting = false;
        f.conn?.destroy();
        f.conn = undefined;
        failures++;
        if (f.stop || this.closed) break;
        // The wait is down: a release meanwhile goes unheard, so the engine re-checks on reconnect.
        await new Promise((res) => setTimeout(res, Math.min(10_000, 250 * 2 ** failures)).unref());
      }
    }
    if (this.followed.get(name) === f) this.followed.delete(name);
    // Here no wait is in flight and no lock held: every path out let the lock go, or never had it.
    if (f.conn !== undefined) this.retire(f.conn);
    f.conn = undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.lingering);
    for (const name of [...this.followed.keys()]) this.unfollow(name);
    for (const s of this.spare.splice(0)) {
      clearTimeout(s.timer);
      s.conn.destroy();
    }
    this.held.clear();
    this.locked.clear();
    const c = this.holding;
    this.holding = undefined;
    if (c !== undefined) await new Promise<void>((resolve) => c.end(() => resolve()));
  }
}

/**
 * For a revocation: the statement that names the connections holding these leases' locks, so
 * the revoker can KILL them (the server lets a user kill its own sessions) and each holder
 * re-checks at once. There is no other way to reach a process from the server: it never waits
 * for anything while it holds a lease.
 */
export function knockTargets(database: string, names: readonly string[]): { sql: string; values: string[] } {
  return { sql: `SELECT ${names.map(() => 'IS_USED_LOCK(?)').join(', ')}`, values: names.map((n) => lockName(database, n)) };
}
