/**
 * MysqlConnector's host list, against a fake mysql2 (no server): which host the next call goes
 * to after a host dies, answers read-only, or is a replica at session setup. The real failover
 * (a killed primary, a promoted replica) is test/serial/mysql-failover.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MysqlConnector, run, type MysqlConnectionLike } from '../../src/backends/mysql/driver.js';
import { parseMysqlUrl } from '../../src/backends/mysql/url.js';

type State = 'up' | 'down' | 'replica' | 'read-only';
type Cb = (err: Error | null, result?: unknown) => void;

const fail = (message: string, extra: object): Error => Object.assign(new Error(message), extra);

/** mysql2 as far as the connector uses it; `states[port]` says how each server behaves now. */
function fakeMysql(states: Record<number, State>) {
  const pools: { port: number; ended: boolean }[] = [];
  const mysql = {
    createConnection(): never {
      throw new Error('the connector tests open no connection outside the pool');
    },
    createPool(config: Record<string, unknown>) {
      const port = config['port'] as number;
      const record = { port, ended: false };
      pools.push(record);
      let onConnection: ((c: MysqlConnectionLike) => void) | undefined;
      return {
        on(_event: 'connection', listener: (c: MysqlConnectionLike) => void) {
          onConnection = listener;
        },
        end(cb?: (err?: Error) => void) {
          record.ended = true;
          cb?.();
        },
        getConnection(cb: (err: Error | null, conn?: MysqlConnectionLike & { release(): void; destroy(): void }) => void) {
          if (states[port] === 'down') return void setImmediate(() => cb(fail(`connect ECONNREFUSED 127.0.0.1:${port}`, { code: 'ECONNREFUSED', errno: -111, fatal: true })));
          // One connection at a time per server is enough here; queries queue on it in order.
          const conn = {
            query(options: { sql: string }, qcb: Cb) {
              setImmediate(() => {
                if (record.ended || states[port] === 'down') return qcb(fail('Connection lost: The server closed the connection.', { code: 'PROTOCOL_CONNECTION_LOST', fatal: true }));
                if (options.sql.startsWith('SET SESSION')) return qcb(null, [{}, {}, [{ v: '10.11.19-MariaDB', ro: states[port] === 'replica' ? 1 : 0 }]]);
                if (states[port] === 'read-only' && !options.sql.startsWith('DO ')) {
                  return qcb(fail('The MariaDB server is running with the --read-only option', { code: 'ER_OPTION_PREVENTS_STATEMENT', errno: 1290 }));
                }
                qcb(null, []);
              });
            },
            release() {},
            destroy() {},
          };
          onConnection?.(conn);
          cb(null, conn);
        },
      };
    },
  };
  return { mysql, pools };
}

const options = { queryTimeoutMs: 1000, connectTimeoutMs: 1000, lockWaitSeconds: 2, idleTransactionSeconds: 5, max: 4 };
const URL3 = 'mysql://root@127.0.0.1:3307,127.0.0.1:3308,127.0.0.1:3309/test';

function connector(states: Record<number, State>, url = URL3) {
  const fake = fakeMysql(states);
  return { c: new MysqlConnector(fake.mysql, parseMysqlUrl(url).target, options), pools: fake.pools };
}

void describe('MysqlConnector with several hosts', () => {
  void it('moves past a dead host to the next, and stays on the one that serves', async () => {
    const states: Record<number, State> = { 3307: 'down', 3308: 'up', 3309: 'up' };
    const { c } = connector(states);
    await assert.rejects(c.query('SELECT 1'), /ECONNREFUSED/);
    assert.equal(c.current, '127.0.0.1:3308');
    await c.query('SELECT 1');
    await c.query('SELECT 1');
    assert.equal(c.current, '127.0.0.1:3308');
  });

  void it('calls in flight when their server dies move the store once, not once each', async () => {
    const states: Record<number, State> = { 3307: 'up', 3308: 'up', 3309: 'up' };
    const { c, pools } = connector(states);
    const conns = await Promise.all([c.connection(), c.connection(), c.connection()]);
    states[3307] = 'down';
    const failures = await Promise.allSettled(
      conns.map(async (conn) => {
        try {
          await run(conn, 'SELECT 1', undefined, 1000);
        } catch (err) {
          c.failed(err); // as MysqlStore does after a fatal error
          throw err;
        }
      }),
    );
    assert.ok(failures.every((f) => f.status === 'rejected'));
    assert.equal(c.current, '127.0.0.1:3308', 'three failures on one server skipped no host');
    await c.query('SELECT 1');
    // A late failure from the dead server's pool leaves the server now in use alone.
    c.failed(await run(conns[0]!, 'SELECT 1', undefined, 1000).catch((e: unknown) => e));
    assert.equal(c.current, '127.0.0.1:3308');
    assert.equal(pools.find((p) => p.port === 3308)?.ended, false, 'the pool of the server in use was not ended');
  });

  void it('a replica at session setup is passed over until one is writable, round the list', async () => {
    const states: Record<number, State> = { 3307: 'down', 3308: 'replica', 3309: 'down' };
    const { c } = connector(states);
    for (let i = 0; i < 6; i++) await assert.rejects(c.query('SELECT 1'), /ECONNREFUSED|read-only/);
    states[3308] = 'up'; // promoted
    let failures = 0;
    for (;;) {
      try {
        await c.query('SELECT 1');
        break;
      } catch {
        assert.ok(++failures < 3, 'the promoted server is found within one round of the list');
      }
    }
    assert.equal(c.current, '127.0.0.1:3308');
  });

  void it('a read-only answer to a statement moves the store, whoever ran the statement', async () => {
    const states: Record<number, State> = { 3307: 'up', 3308: 'up', 3309: 'up' };
    const { c } = connector(states);
    const conn = await c.connection();
    states[3307] = 'read-only'; // a switchover: the old primary set read-only under a live session
    // Not through c.query and with no c.failed: as MysqlStore's lock-retry path runs a claim.
    await assert.rejects(run(conn, 'UPDATE t SET x = 1', undefined, 1000), (e: { errno?: number }) => e.errno === 1290);
    assert.equal(c.current, '127.0.0.1:3308');
  });

  void it('one host: a dead server is not left, there is nowhere to go', async () => {
    const states: Record<number, State> = { 3307: 'down' };
    const { c } = connector(states, 'mysql://root@127.0.0.1:3307/test');
    await assert.rejects(c.query('SELECT 1'), /ECONNREFUSED/);
    assert.equal(c.current, '127.0.0.1:3307');
  });
});
