/** How `pg`'s errors reach the engine: retryable (the connection, a timeout, lock contention), a wrong setting, or the schema. */
import { ConfigError, LeaseholdError, SchemaError, StoreError, StoreUnavailableError } from '../../core/errors.js';

// Connection-level failures: the outcome of the call is unknown, try again later.
// 53: insufficient resources (53100 disk full, 53200 out of memory, 53300 too many connections);
// 58030: an I/O error writing (a full WAL disk): both clear without a change of configuration.
const UNAVAILABLE_SQLSTATE = /^(08|53|57P0|57014|58030|40001|40P01|55P03)/;
const NODE_NET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ECONNABORTED']);
const SQLSTATE = /^[0-9A-Z]{5}$/;
// What the pg driver (and pg-pool) say when the connection failed, dropped or timed out.
const PG_CLIENT_UNAVAILABLE =
  /Connection terminated|connection timeout|timeout exceeded when trying to connect|Query read timeout|not queryable|Client was closed|ECONN|EPIPE|ETIMEDOUT|socket hang up|read ECONNRESET/i;

/** Node's TLS verification failures (err.code): the server's certificate is not the one the URL trusts. */
const TLS_CODES = /^(?:SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(?:_LOCALLY)?|CERT_HAS_EXPIRED|CERT_NOT_YET_VALID|CERT_UNTRUSTED|ERR_TLS_CERT_ALTNAME_INVALID|ERR_SSL_\w+)$/;

/**
 * Maps a `pg` error to leasehold's taxonomy. Only what is known to be a connection problem, a
 * timeout, a shutdown or lock contention is retryable (`StoreUnavailableError`): anything else
 * (an SQL error, a constraint, an error nobody anticipated) is a `StoreError`, which the engine
 * reports instead of retrying in silence for ever.
 */
export function mapPgError(err: unknown, schema: string): Error {
  if (err instanceof LeaseholdError) return err;
  const e = err as { code?: string; message?: string };
  const code = typeof e.code === 'string' ? e.code : '';
  const msg = e.message ?? String(err);
  // 42703: a column this leasehold expects is missing (tables from an older or foreign layout).
  if (code === '3F000' || code === '42P01' || code === '42883' || code === '42703') {
    return new SchemaError(`leasehold's tables are missing or out of date in schema "${schema}" (${msg}); run \`leasehold migrate --store <url>\``, {
      cause: err,
    });
  }
  if (code === '3D000') return new ConfigError(`database does not exist (${msg}); check the store URL`, { cause: err });
  if (code.startsWith('28')) return new ConfigError(`PostgreSQL refused the login (${msg}); check the user and password in the store URL`, { cause: err });
  if (code === '42501') {
    return new ConfigError(`PostgreSQL refused a statement (${msg}); grant the store's user access to schema "${schema}"`, { cause: err });
  }
  // PgBouncer refuses startup parameters it does not track (statement_timeout=, options=, ...)
  // with a protocol-violation SQLSTATE that would otherwise read as an outage, retried for ever.
  const startup = /unsupported startup parameter: (\S+)/.exec(msg);
  if (startup !== null) {
    return new ConfigError(
      `the server (a pooler such as PgBouncer) refused the store URL's ${startup[1]}= (${msg}); remove it from the URL, ` +
        "or list it in PgBouncer's ignore_startup_parameters (or set it on the server or the database instead)",
      { cause: err },
    );
  }
  // Retried like an outage (the server's certificate may be mid-rotation), but says what to check.
  if (TLS_CODES.test(code) || /does not support SSL/.test(msg)) {
    return new StoreUnavailableError(
      `the TLS connection to PostgreSQL failed (${code === '' ? '' : `${code}: `}${msg}); check the store URL's sslmode= and sslrootcert= ` +
        "(the CA that signed the server's certificate, whose names must include the URL's host) and the server's ssl settings",
      { cause: err },
    );
  }
  // A standby, or a primary demoted under us: the write did not land. Retryable, as a failover
  // in progress is; a multi-host URL moves to the primary on the next call (./multi-host.ts).
  if (code === '25006') {
    return new StoreUnavailableError(
      `PostgreSQL is read-only here (${msg}): the server is a standby or was demoted; this is retryable: ` +
        'list the servers in the store URL with target_session_attrs=read-write (postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write), or point it at the primary',
      { cause: err },
    );
  }
  if (UNAVAILABLE_SQLSTATE.test(code) || NODE_NET_ERRORS.has(code)) {
    return new StoreUnavailableError(`PostgreSQL is unavailable (${msg}); this is retryable, check the server`, { cause: err });
  }
  // A server error always carries a five-character SQLSTATE: one not matched above is an answer,
  // not an outage. Without one, only the driver's own connection and timeout messages count.
  if (!SQLSTATE.test(code) && PG_CLIENT_UNAVAILABLE.test(msg)) {
    return new StoreUnavailableError(`PostgreSQL is unavailable (${msg}); this is retryable, check the server`, { cause: err });
  }
  return new StoreError(
    `PostgreSQL refused leasehold's statement (${code === '' ? '' : `SQLSTATE ${code}: `}${msg}); this is not retried: ` +
      'check the schema with `leasehold doctor`, and report it if it persists',
    { cause: err },
  );
}
