/** How `mysql2`'s errors reach the engine: retryable (the connection, a timeout, lock contention), a wrong setting, or the schema. */
import { ConfigError, LeaseholdError, SchemaError, StoreError, StoreUnavailableError } from '../../core/errors.js';

/** Server error numbers (errno) that mean the outcome is unknown or the server is not there. */
const UNAVAILABLE_ERRNO = new Set([
  1040, // too many connections
  1053, // server shutdown in progress
  1077, // normal shutdown
  1152, // aborted connection
  1158, 1159, 1160, 1161, // network read/write errors and timeouts
  1205, // lock wait timeout (retried inside the call first)
  1213, // deadlock (retried inside the call first)
  1927, // MariaDB: connection was killed (idle_transaction_timeout, KILL)
  1969, // MariaDB: max_statement_time exceeded
  3024, // MySQL: max_execution_time exceeded
  4031, // MySQL 8: disconnected by the server for inactivity
]);
/** Read-only servers: a replica, or a primary set read-only for a switchover. */
const READ_ONLY_ERRNO = new Set([1290, 1836]);
const NODE_NET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ECONNABORTED']);
/** mysql2's own codes for a connection that failed, dropped or timed out. */
const DRIVER_UNAVAILABLE = /^(PROTOCOL_CONNECTION_LOST|PROTOCOL_SEQUENCE_TIMEOUT|PROTOCOL_ENQUEUE_AFTER_FATAL_ERROR|PROTOCOL_ENQUEUE_AFTER_QUIT|ER_SERVER_SHUTDOWN|HANDSHAKE_\w+)$/;

/** Deadlock or lock-wait timeout: InnoDB rolled the statement (or the transaction) back; run it again. */
export function isRetryableLockError(err: unknown): boolean {
  const errno = (err as { errno?: unknown }).errno;
  return errno === 1213 || errno === 1205;
}

/**
 * Maps a `mysql2` error to leasehold's taxonomy. Only what is known to be a connection problem,
 * a timeout, a shutdown or lock contention is retryable; anything else is a `StoreError`, which
 * the engine reports instead of retrying in silence for ever.
 */
export function mapMysqlError(err: unknown, database: string): Error {
  if (err instanceof LeaseholdError) return err;
  const e = err as { code?: string; errno?: number; message?: string; sqlState?: string };
  const errno = typeof e.errno === 'number' ? e.errno : undefined;
  const code = typeof e.code === 'string' ? e.code : '';
  const msg = e.message ?? String(err);
  // 1146 no such table, 1054 no such column, 1305 no such routine: tables older than this leasehold.
  if (errno === 1146 || errno === 1054 || errno === 1305) {
    return new SchemaError(`leasehold's tables are missing or out of date in database "${database}" (${msg}); run \`leasehold migrate --store <url>\``, {
      cause: err,
    });
  }
  // 1153: a packet larger than the server's max_allowed_packet (the server may close the
  // connection instead, which reads as unavailable: ./driver.ts `fits` refuses one before it is
  // sent, with this errno). Not retryable: the same batch is refused again.
  if (errno === 1153 || code === 'ER_NET_PACKET_TOO_LARGE') {
    return new ConfigError(
      `MySQL refused a statement larger than its max_allowed_packet (${msg}); raise max_allowed_packet on the server ` +
        '(SET GLOBAL max_allowed_packet = 67108864, and in its configuration file so that a restart keeps it), or send fewer or shorter items per call',
      { cause: err },
    );
  }
  if (errno === 1049) return new ConfigError(`MySQL database "${database}" does not exist (${msg}); create it (CREATE DATABASE ${database}) or fix the store URL`, { cause: err });
  if (errno === 1045 || errno === 1044 || errno === 1698) {
    // MariaDB's require_secure_transport refuses a session without TLS with this same error.
    return new ConfigError(
      `MySQL refused the login (${msg}); check the user and password in the store URL, and whether the server requires TLS ` +
        '(require_secure_transport, or a user created with REQUIRE SSL/X509): then add sslmode=verify-full&cacert=<CA file> (and cert=, key=)',
      { cause: err },
    );
  }
  if (errno === 1142 || errno === 1143 || errno === 1227 || errno === 1370) {
    return new ConfigError(`MySQL refused a statement (${msg}); grant the store's user ALL on database "${database}"`, { cause: err });
  }
  if (errno !== undefined && READ_ONLY_ERRNO.has(errno)) {
    return new StoreUnavailableError(
      `MySQL is read-only here (${msg}): the server is a replica or was set read-only; this is retryable: list the servers in the store URL ` +
        '(mysql://user@h1:3306,h2:3306/db) so the store moves to the writable one, or point it at the primary',
      { cause: err },
    );
  }
  if (/^(ERR_TLS_|ERR_SSL_|SELF_SIGNED|DEPTH_ZERO|UNABLE_TO_|CERT_)/.test(code) || /SSL|TLS/.test(code) || errno === 3159 || errno === 2026) {
    return new StoreUnavailableError(
      `the TLS connection to MySQL failed (${code === '' ? '' : `${code}: `}${msg}); check the store URL's sslmode= and cacert= and the server's TLS settings`,
      { cause: err },
    );
  }
  if ((errno !== undefined && UNAVAILABLE_ERRNO.has(errno)) || NODE_NET_ERRORS.has(code) || DRIVER_UNAVAILABLE.test(code) || /Pool is closed|connect ETIMEDOUT|Connection lost/i.test(msg)) {
    return new StoreUnavailableError(`MySQL is unavailable (${msg}); this is retryable, check the server`, { cause: err });
  }
  return new StoreError(
    `MySQL refused leasehold's statement (${errno === undefined ? code : `error ${errno}`}: ${msg}); this is not retried: check the schema with \`leasehold doctor\`, and report it if it persists`,
    { cause: err },
  );
}
