/**
 * What every command shares: exit codes, argument parsing (node:util parseArgs, strict), the
 * flag > LEASEHOLD_* env > default rule, opening the store, and turning any error into the one
 * line a person at a terminal (or a cron mail) can act on.
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import type { ParseArgsConfig } from 'node:util';
import { parseDuration } from '../core/config.js';
import { ConfigError, LeaseholdError, NotAcquiredError, SchemaError, StoreUnavailableError, errorMessage } from '../core/errors.js';
import { openStore, resolveStoreUrl } from '../stores/index.js';
import type { LeaseStore } from '../stores/store.js';

/** Exit codes. Keep in step with the table in `leasehold --help` (main.ts) and the README. */
export const EXIT = {
  OK: 0,
  /** A check failed (doctor), or release found nothing to revoke. */
  FAILED: 1,
  /** Usage or configuration: unknown flag, missing `--`, bad duration, bad URL, bad name. */
  USAGE: 2,
  /** The store is unreachable, or its schema is missing or of another version. */
  STORE: 3,
  /** `run`: never became leader (`--no-wait`, or `--wait D` ran out). EX_TEMPFAIL. */
  NOT_LEADER: 75,
  /** `run`: the lease was lost while the command was running; the command was killed. */
  LOST: 76,
} as const;

/** An error that carries its exit code. Its message is already the one line to print. */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(exitCode: number, message: string) {
    super(message);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}

export function usageError(message: string): CliError {
  return new CliError(EXIT.USAGE, message);
}

/** Maps any error to an exit code. Anything unexpected is 1, never a stack trace. */
export function exitCodeFor(err: unknown): number {
  if (err instanceof CliError) return err.exitCode;
  if (err instanceof ConfigError) return EXIT.USAGE;
  if (err instanceof SchemaError || err instanceof StoreUnavailableError) return EXIT.STORE;
  if (err instanceof NotAcquiredError) {
    // A --wait that ran out while the store was down is a store problem, not contention.
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof StoreUnavailableError || cause instanceof SchemaError ? EXIT.STORE : EXIT.NOT_LEADER;
  }
  if (isParseArgsError(err)) return EXIT.USAGE;
  return EXIT.FAILED;
}

function isParseArgsError(err: unknown): err is Error & { code: string } {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_');
}

/** One line, `leasehold: <what is wrong>; <what to do>`. */
export function errorLine(err: unknown, command?: string): string {
  let msg = errorMessage(err);
  if (isParseArgsError(err)) {
    // node's wording ("Unknown option '--x'. To specify a positional argument starting with a
    // '-', place it at the end of the command after '--', as in '-- \"--x\"") is good but long.
    msg = msg.replace(/\. To specify a positional argument.*$/s, '').replace(/\.$/, '');
    msg = `${msg.charAt(0).toLowerCase()}${msg.slice(1)}; see \`leasehold ${command ?? ''}${command === undefined ? '' : ' '}--help\``;
  } else if (err instanceof StoreUnavailableError) {
    msg = cliMessage(err);
    if (!/leasehold doctor/.test(msg)) msg = `${msg} (\`leasehold doctor\` checks the store)`;
  }
  return `leasehold: ${msg.replace(/\s*\n\s*/g, ' ').trim()}`;
}

/** An error's message as a CLI reports it: the library retries a store call, a command that got here has stopped. */
export function cliMessage(e: unknown): string {
  return errorMessage(e).replace(/;? this is retryable[,.:]?/, ';');
}

type Options = NonNullable<ParseArgsConfig['options']>;

/** The options every store-using command takes. */
export const STORE_OPTIONS = {
  store: { type: 'string' },
  schema: { type: 'string' },
} as const satisfies Options;

/** A flag, else its LEASEHOLD_* variable, else undefined. Empty strings count as unset. */
export function flagOrEnv(flag: string | undefined, envName: string, env: NodeJS.ProcessEnv = process.env): { value: string; from: string } | undefined {
  if (flag !== undefined) return { value: flag, from: 'flag' };
  const v = env[envName];
  if (v !== undefined && v !== '') return { value: v, from: envName };
  return undefined;
}

/** A duration from a flag or an env var, validated here at the edge (exit 2 when malformed). */
export function durationOption(flag: string | undefined, flagName: string, envName: string, env: NodeJS.ProcessEnv = process.env): number | undefined {
  const v = flagOrEnv(flag, envName, env);
  if (v === undefined) return undefined;
  const what = v.from === 'flag' ? `--${flagName}` : envName;
  try {
    return parseDuration(v.value, what);
  } catch (err) {
    throw usageError(errorMessage(err));
  }
}

/** The store URL (`--store` > LEASEHOLD_STORE > the embedded default), checked before opening. */
export function storeUrl(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  if (flag !== undefined && flag.trim() === '') throw usageError('--store is empty; give a store URL like sqlite:/path/leases.db or postgres://user@host/db');
  return resolveStoreUrl(flag, env);
}

/**
 * Opens the store named by the flags. Bad URLs are ConfigErrors (exit 2); nothing here talks to
 * the server yet (PostgreSQL connects lazily), except SQLite which opens and migrates its file.
 */
export async function openStoreFromFlags(values: { store?: string | undefined; schema?: string | undefined }, env: NodeJS.ProcessEnv = process.env): Promise<{ store: LeaseStore; url: string }> {
  const url = storeUrl(values.store, env);
  const schema = flagOrEnv(values.schema, 'LEASEHOLD_SCHEMA', env)?.value;
  const store = await openStore(url, schema === undefined ? {} : { schema });
  return { store, url };
}

/** Fails with exit 3 unless the store answers and its schema is the one this build needs. */
export async function requireCurrentSchema(store: LeaseStore): Promise<void> {
  const s = await store.schemaStatus();
  if (s.current === s.expected) return;
  if (s.current === 0) {
    throw new CliError(EXIT.STORE, `leasehold's tables do not exist in ${store.description}; run \`leasehold migrate\` with the same --store (and --schema) first`);
  }
  if (s.current < s.expected) {
    throw new CliError(EXIT.STORE, `${store.description} has schema version ${s.current}, this leasehold needs ${s.expected}; run \`leasehold migrate\``);
  }
  throw new CliError(EXIT.STORE, `${store.description} has schema version ${s.current}, newer than this leasehold (${s.expected}); upgrade leasehold`);
}

/** `1.2s`, `350ms`, `2m05s`: short enough for a table column. */
export function formatMs(ms: number): string {
  const neg = ms < 0;
  const a = Math.abs(Math.round(ms));
  let s: string;
  if (a < 1000) s = `${a}ms`;
  else if (a < 60_000) s = `${a < 10_000 && a % 1000 !== 0 ? (a / 1000).toFixed(1) : Math.round(a / 1000)}s`;
  else if (a < 3_600_000) s = `${Math.floor(a / 60_000)}m${String(Math.floor((a % 60_000) / 1000)).padStart(2, '0')}s`;
  else s = `${Math.floor(a / 3_600_000)}h${String(Math.floor((a % 3_600_000) / 60_000)).padStart(2, '0')}m`;
  return neg ? `-${s}` : s;
}

/** Left-aligned columns, two spaces apart. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ').trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** JSON with bigints as strings (tokens overflow a JS number after 2^53). */
export function toJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2);
}

export function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

export function err(line: string): void {
  process.stderr.write(`${line}\n`);
}

/**
 * util-linux `setpriv`, which the runner uses to give its child a parent-death signal. Looked
 * up at /usr/bin/setpriv first (Debian), then on PATH.
 */
export function findSetpriv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const candidates = ['/usr/bin/setpriv', ...(env['PATH'] ?? '').split(delimiter).filter((d) => d !== '').map((d) => join(d, 'setpriv'))];
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      return c;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** Whether a file could be created at `path`: the nearest existing ancestor must be a writable directory. */
export function canCreate(path: string): { ok: boolean; dir: string } {
  let dir = dirname(path);
  while (!existsSync(dir)) {
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  try {
    accessSync(existsSync(path) ? path : dir, constants.W_OK);
    return { ok: true, dir };
  } catch {
    return { ok: false, dir };
  }
}

export function isLeaseholdError(e: unknown): e is LeaseholdError {
  return e instanceof LeaseholdError;
}
