/**
 * What every command shares: exit codes, argument parsing (node:util parseArgs, strict), the
 * flag > LEASEHOLD_* env > default rule, opening the store, and turning any error into the one
 * line a person at a terminal (or a cron mail) can act on.
 */
import { accessSync, constants, existsSync, readFileSync, statSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { parseDuration } from '../core/config.js';
import { ConfigError, LivenessError, NotAcquiredError, SchemaError, StoreError, StoreUnavailableError, errorMessage } from '../core/errors.js';
import { AlreadyOwnedError, NoLiveAgentError, NoOwnerError, OwnerChangedError, OwnerDeadError } from '../fleet/errors.js';
import { openStore, resolveStoreUrl } from '../backends/index.js';
import type { LeaseAdmin, LeaseStore } from '../backends/store.js';
import { escapeControls, jsonSafe } from './escape.js';

/** Exit codes. Keep in step with the table in `leasehold --help` (main.ts) and the exit-code table in docs/cli.md. */
export const EXIT = {
  OK: 0,
  /** A check failed (doctor), or release found nothing to revoke. */
  FAILED: 1,
  /** Usage or configuration: unknown flag, missing `--`, bad duration, bad URL, bad name. */
  USAGE: 2,
  /**
   * The store is unreachable, or its schema is missing or of another version, or it refused a
   * statement with an error waiting will not fix (a StoreError).
   */
  STORE: 3,
  /** `fleet owner`: no ownership record for the resource. */
  NO_OWNER: 4,
  /** `fleet owner`: a record exists, but its agent is not alive by the store's clock. */
  OWNER_DEAD: 5,
  /** `fleet place` / `reassign`: no live, non-draining agent can take it. */
  NO_LIVE_AGENT: 6,
  /** `fleet place`: already owned; `fleet reassign`: the owner is not --from. */
  CONFLICT: 7,
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
  // A refused liveness 'session' is configuration too: the message names what to change.
  if (err instanceof ConfigError || err instanceof LivenessError) return EXIT.USAGE;
  // A StoreError is the store answering with something leasehold did not expect: still a store
  // problem (3), not a crash of leasehold's (1), so `run`'s exit table covers it.
  if (err instanceof SchemaError || err instanceof StoreUnavailableError || err instanceof StoreError) return EXIT.STORE;
  if (err instanceof NotAcquiredError) {
    // A --wait that ran out while the store was down is a store problem, not contention.
    const cause = (err as { cause?: unknown }).cause;
    return cause instanceof StoreUnavailableError || cause instanceof SchemaError ? EXIT.STORE : EXIT.NOT_LEADER;
  }
  if (isParseArgsError(err)) return EXIT.USAGE;
  if (err instanceof NoOwnerError) return EXIT.NO_OWNER;
  if (err instanceof OwnerDeadError) return EXIT.OWNER_DEAD;
  if (err instanceof NoLiveAgentError) return EXIT.NO_LIVE_AGENT;
  if (err instanceof AlreadyOwnedError || err instanceof OwnerChangedError) return EXIT.CONFLICT;
  return EXIT.FAILED;
}

function isParseArgsError(err: unknown): err is Error & { code: string } {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_');
}

/** One line, `leasehold: <what is wrong>; <what to do>`. */
export function errorLine(err: unknown, command?: string): string {
  return `leasehold: ${escapeControls(errorText(err, command))}`;
}

/** An error as one line without the `leasehold: ` prefix: what is wrong, and what to do. */
function errorText(err: unknown, command?: string): string {
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
  return msg.replace(/\s*\n\s*/g, ' ').trim();
}

/** An error's message as a CLI reports it: the library retries a store call, a command that got here has stopped. */
export function cliMessage(e: unknown): string {
  return errorMessage(e).replace(/;? this is retryable[,.:]?/, ';');
}

/** A flag, else its LEASEHOLD_* variable, else undefined. Empty strings count as unset. */
/** A port from a flag or its environment variable (0: any free port). @throws usage error (exit 2) */
export function portOption(flag: string | undefined, flagName: string, envName: string, env: NodeJS.ProcessEnv): number | undefined {
  const v = flagOrEnv(flag, envName, env);
  if (v === undefined) return undefined;
  if (!/^\d{1,5}$/.test(v.value) || Number(v.value) > 65535) {
    throw usageError(`${v.from === 'flag' ? `--${flagName}` : v.from} ${JSON.stringify(v.value)} is not a port; give a whole number from 0 to 65535`);
  }
  return Number(v.value);
}

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

/**
 * The store flags as a command has them: parseArgs values (`'store-file'`) or settings built by
 * hand (`storeFile`). Either spelling is accepted so every caller can pass what it holds.
 */
export interface StoreFlagValues {
  store?: string | undefined;
  storeFile?: string | undefined;
  'store-file'?: string | undefined;
  schema?: string | undefined;
}

/** Where the store URL came from: a flag, a variable, or nowhere (the embedded default). */
type StoreSource = '--store' | '--store-file' | 'LEASEHOLD_STORE_FILE' | 'LEASEHOLD_STORE' | 'default';

/**
 * The store URL: `--store` > `--store-file` > LEASEHOLD_STORE_FILE or LEASEHOLD_STORE > the
 * embedded default. Both flags at once is a usage error. Both variables at once is allowed when
 * they name the same store: `leasehold run` hands its command LEASEHOLD_STORE, and that command
 * may have inherited LEASEHOLD_STORE_FILE too.
 */
export function resolveStore(values: StoreFlagValues, env: NodeJS.ProcessEnv = process.env): { url: string; from: StoreSource } {
  const file = values.storeFile ?? values['store-file'];
  if (values.store !== undefined && file !== undefined) {
    throw usageError('--store and --store-file contradict each other; pick one (--store-file keeps a password out of ps)');
  }
  if (values.store !== undefined) {
    if (values.store.trim() === '') throw usageError('--store is empty; give a store URL like sqlite:/path/leases.db or postgres://user@host/db');
    if (hasPassword(values.store)) warnOnce('store-password', 'the password in --store is visible to other users in ps; use --store-file or LEASEHOLD_STORE');
    return { url: values.store, from: '--store' };
  }
  if (file !== undefined) {
    if (file.trim() === '') throw usageError('--store-file is empty; give the path of a file whose first line is the store URL');
    return { url: readStoreFile(file, '--store-file'), from: '--store-file' };
  }
  const envFile = env['LEASEHOLD_STORE_FILE'];
  const envUrl = env['LEASEHOLD_STORE'];
  if (envFile !== undefined && envFile !== '') {
    const url = readStoreFile(envFile, 'LEASEHOLD_STORE_FILE');
    if (envUrl !== undefined && envUrl !== '' && envUrl.trim() !== url) {
      throw usageError('LEASEHOLD_STORE and LEASEHOLD_STORE_FILE name different stores; unset one of them (or pass --store-file)');
    }
    return { url, from: 'LEASEHOLD_STORE_FILE' };
  }
  if (envUrl !== undefined && envUrl !== '') return { url: envUrl, from: 'LEASEHOLD_STORE' };
  return { url: resolveStoreUrl(undefined, env), from: 'default' };
}

/** The first non-empty line of a file, trimmed. Every way it can fail is a usage error (exit 2). */
function readStoreFile(path: string, what: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    const shown = `${what} ${JSON.stringify(path)}`;
    if (code === 'ENOENT') throw usageError(`${shown} does not exist; create it with the store URL on its first line (chmod 600), or check the path`);
    if (code === 'EACCES' || code === 'EPERM') throw usageError(`${shown} cannot be read (permission denied); run as its owner or make it readable by this user only`);
    if (code === 'EISDIR') throw usageError(`${shown} is a directory; give the file whose first line is the store URL`);
    throw usageError(`${shown} cannot be read: ${errorMessage(e)}`);
  }
  const line = text.split(/\r?\n/).map((l) => l.trim()).find((l) => l !== '');
  if (line === undefined) throw usageError(`${what} ${JSON.stringify(path)} is empty; put the store URL on its first line`);
  // A password in a file every user can read is no better hidden than one in ps.
  if (hasPassword(line) && (statSync(path).mode & 0o044) !== 0) {
    warnOnce('store-file-mode', `${what} ${JSON.stringify(path)} holds a password and other users can read it; chmod 600 it`);
  }
  return line;
}

/** A password in the URL's user info, or in a `password=` query parameter (libpq accepts both). */
function hasPassword(url: string): boolean {
  try {
    const u = new URL(url);
    return u.password !== '' || u.searchParams.has('password');
  } catch {
    return /^[a-z][a-z0-9+.-]*:\/\/[^/@]*:[^/@]+@/i.test(url);
  }
}

/** The store URL (`--store` > `--store-file` > the variables > the embedded default), checked before opening. */
export function storeUrl(flags: string | undefined | StoreFlagValues, env: NodeJS.ProcessEnv = process.env): string {
  return resolveStore(typeof flags === 'object' ? flags : { store: flags }, env).url;
}

/**
 * Opens the store named by the flags. Bad URLs are ConfigErrors (exit 2); nothing here talks to
 * the server yet (PostgreSQL connects lazily), except SQLite which opens and migrates its file.
 */
export async function openStoreFromFlags(values: StoreFlagValues, env: NodeJS.ProcessEnv = process.env): Promise<{ store: LeaseStore; url: string }> {
  const { url } = resolveStore(values, env);
  const schema = flagOrEnv(values.schema, 'LEASEHOLD_SCHEMA', env)?.value;
  const store = await openStore(url, schema === undefined ? {} : { schema });
  return { store, url };
}

/** Fails with exit 3 unless the store answers and its schema is the one this build needs. */
export async function requireCurrentSchema(store: LeaseAdmin): Promise<void> {
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

// ---- diagnostics on stderr: text or JSON lines -------------------------------------------

type LogFormat = 'text' | 'json';

/** `--log-format` > LEASEHOLD_LOG_FORMAT > text. Anything else is a usage error. */
export function logFormatOption(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): LogFormat {
  const v = flagOrEnv(flag, 'LEASEHOLD_LOG_FORMAT', env);
  if (v === undefined) return 'text';
  const f = v.value.trim().toLowerCase();
  if (f === 'text' || f === 'json') return f;
  throw usageError(`${v.from === 'flag' ? '--log-format' : 'LEASEHOLD_LOG_FORMAT'} ${JSON.stringify(v.value)} is not a log format; use text or json`);
}

/**
 * The format of this process's diagnostics. main.ts sets it from argv before the command parses
 * its flags, so that even an unknown-flag error comes out as JSON when JSON was asked for; the
 * command sets it again, validated, once parsed.
 */
const logContext: { format: LogFormat; command: string | undefined } = { format: 'text', command: undefined };

export function setLogContext(ctx: { format?: LogFormat; command?: string }): void {
  if (ctx.format !== undefined) logContext.format = ctx.format;
  if (ctx.command !== undefined) logContext.command = ctx.command;
}

/**
 * `--log-format` as written in argv (before any `--`), else LEASEHOLD_LOG_FORMAT; text when
 * absent or invalid (the command's own parsing reports an invalid value).
 */
export function sniffLogFormat(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): LogFormat {
  const end = argv.indexOf('--');
  const args = end === -1 ? argv : argv.slice(0, end);
  let flag: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--log-format') flag = args[i + 1];
    else if (a.startsWith('--log-format=')) flag = a.slice('--log-format='.length);
  }
  try {
    return logFormatOption(flag, env);
  } catch {
    return 'text';
  }
}

type LogLevel = 'info' | 'warn' | 'error';

interface CliLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * Diagnostics on stderr, in the process's log format. Text: `leasehold: msg`, warnings as
 * `leasehold: warning: msg`; with `name`, `leasehold[name]: msg` (fields are not printed, the
 * message must say it all). JSON: one object per line, `{ time, level, command, name?, msg,
 * ...fields }`, bigints as strings. stdout is left to the command's result.
 */
export function cliLog(options: { name?: string } = {}): CliLog {
  const write = (level: LogLevel, msg: string, fields?: Record<string, unknown>): void => {
    if (logContext.format === 'json') {
      const line = {
        time: new Date().toISOString(),
        level,
        ...(logContext.command === undefined ? {} : { command: logContext.command }),
        ...(options.name === undefined ? {} : { name: options.name }),
        msg,
        ...fields,
      };
      err(jsonSafe(JSON.stringify(line, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))));
      return;
    }
    const prefix = options.name === undefined ? 'leasehold: ' : `leasehold[${options.name}]: `;
    err(`${prefix}${level === 'warn' ? 'warning: ' : ''}${escapeControls(msg.replace(/\s*\n\s*/g, ' ').trim())}`);
  };
  return {
    info: (msg, fields) => write('info', msg, fields),
    warn: (msg, fields) => write('warn', msg, fields),
    error: (msg, fields) => write('error', msg, fields),
  };
}

const warned = new Set<string>();

/** A warning printed at most once per process (a command may resolve its store more than once). */
function warnOnce(key: string, msg: string): void {
  if (warned.has(key)) return;
  warned.add(key);
  cliLog().warn(msg);
}

/** How main.ts reports the error a command ended with: one line on stderr, in the log format. */
export function reportError(e: unknown, command?: string): void {
  if (logContext.format === 'json') {
    const code = (e as { code?: unknown } | null)?.code;
    cliLog().error(errorText(e, command), { exitCode: exitCodeFor(e), ...(typeof code === 'string' ? { code } : {}) });
  } else {
    err(errorLine(e, command));
  }
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

/** Left-aligned columns, two spaces apart; every cell one line, its controls escaped (src/cli/escape.ts). */
export function table(header: string[], body: string[][]): string {
  const rows = body.map((r) => r.map(escapeControls));
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ').trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** JSON with bigints as strings (tokens overflow a JS number after 2^53), terminal-safe (src/cli/escape.ts). */
export function toJson(value: unknown): string {
  return jsonSafe(JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2));
}

/** One event as one line of JSON (a stream a consumer reads line by line, `jq -c` style). */
export function toJsonLine(value: unknown): string {
  return jsonSafe(JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)));
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
