import { performance } from 'node:perf_hooks';
import { ConfigError, SchemaError, StoreUnavailableError, errorMessage } from '../core/errors.js';
import { backendForUrl, defaultStoreUrl } from '../backends/index.js';
import type { LeaseAdmin, LeaseStore } from '../backends/store.js';
import { EXIT, canCreate, cliMessage, findSetpriv, formatMs, logFormatOption, openStoreFromFlags, out, setLogContext, storeUrl, toJson, usageError } from './common.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';
import { escapeControls } from './escape.js';
import { parseRunArgs } from './run-args.js';

export const DOCTOR_SPEC = defineCommand({
  name: 'doctor',
  summary: 'Store reachable, schema current, clock skew, configuration, setpriv.',
  about: `Checks, each reported ok / warn / fail:
  config         LEASEHOLD_TTL, LEASEHOLD_RENEW, LEASEHOLD_GRACE, LEASEHOLD_WAIT, LEASEHOLD_NAME
                 parse and fit together (renew <= ttl/2, grace < ttl - renew)
  default-store  the embedded default's directory is writable
  setpriv        util-linux setpriv is installed (without it a SIGKILLed runner leaves its
                 command running)
  store          the store URL is valid and the store answers (with its round-trip latency)
  schema         the store's schema is the version this leasehold needs (else: leasehold migrate)
  clock-skew     the store's clock against this host's; expiry is judged by the store's clock
                 alone, so skew misleads humans reading timestamps, not the lease (warn > 1s)
  eviction       Redis: maxmemory-policy is noeviction. Any other policy, volatile-* included
                 (lease records carry an expiry), can delete a live lease when memory is full and
                 let a second process lead (fail; warn with no maxmemory set)
  sqlite-driver  SQLite: the driver that opens the file (node:sqlite where Node has it, else
                 better-sqlite3; LEASEHOLD_SQLITE_DRIVER forces one) and its SQLite version
  sqlite-files   SQLite: the store's directory, file, -wal and -shm are not writable by group or
                 others (whoever can replace the file can reset the tokens)
  quick-check    SQLite: PRAGMA quick_check finds the file sound (a damaged file fails, and
                 the store is then not opened)
  token-floor    a fenced resource's high-water mark (--fence-high-water N, and the fence table
                 beside the leases on PostgreSQL and SQLite) against the store's next token: a
                 mark at or above it means the store lost its history and every new term's
                 writes will be fenced (fail; remedy: leasehold migrate --min-token N).
                 --fence-lease NAME compares with that lease's next token instead of the
                 highest any lease would get
  restore        etcd: the store does not look restored from an older backup (its revisions
                 ahead of its raft log, or a mark left by a process that saw them go back);
                 while it does, no term is granted (fail; remedy: leasehold migrate
                 --min-token N, N at least every fenced resource's high-water mark)`,
  flags: {
    ...STORE_FLAGS,
    json: {
      type: 'boolean',
      help: 'one object on stdout: { ok, exitCode, store, checks: [{ check, status, detail, ... }] }, for every outcome but a usage error',
    },
    'fence-high-water': {
      type: 'string',
      value: 'N',
      help: "a fenced resource's high-water mark: fail if the store's next token is not above it (remedy: leasehold migrate --min-token N)",
    },
    'fence-lease': { type: 'string', value: 'NAME', help: 'with --fence-high-water: compare with this lease\'s next token, not the highest any lease would get' },
    ...LOG_FLAGS,
  },
  footer: `Exit 0 if nothing failed, 1 if a check failed, 2 if the store URL is invalid, 3 if the store
is unreachable.`,
});

export const DOCTOR_USAGE = helpText(DOCTOR_SPEC);

type Status = 'ok' | 'warn' | 'fail' | 'skip';
interface Check {
  check: string;
  status: Status;
  detail: string;
  [extra: string]: unknown;
}

const SKEW_WARN_MS = 1000;

export async function doctorCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(DOCTOR_SPEC, argv);
  if (values.help === true) {
    out(DOCTOR_USAGE);
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals.length > 0) {
    throw usageError(`doctor takes no arguments, got ${JSON.stringify(positionals[0])}; use --store URL`);
  }
  const highWater = parseHighWater(values['fence-high-water'], values['fence-lease']);
  const checks: Check[] = [];
  let exitCode: number = EXIT.OK;
  checks.push(configCheck());
  checks.push(defaultStoreCheck());
  checks.push(setprivCheck());

  let store: LeaseStore | undefined;
  let description = '';
  try {
    const url = storeUrl(values);
    description = url.replace(/:[^:@/]*@/, ':***@');
    const preflight = await backendForUrl(url)?.preflight?.(url);
    if (preflight !== undefined) checks.push(...preflight.checks);
    if (preflight !== undefined && !preflight.open) {
      checks.push({ check: 'store', status: 'skip', detail: `not opened: ${preflight.reason ?? 'a check above failed'}` });
    } else {
      ({ store } = await openStoreFromFlags(values));
      description = store.description;
    }
  } catch (e) {
    checks.push({ check: 'store', status: 'fail', detail: errorMessage(e) });
    exitCode = e instanceof ConfigError || (e as { exitCode?: number }).exitCode === EXIT.USAGE ? EXIT.USAGE : EXIT.STORE;
  }
  if (store !== undefined) {
    try {
      exitCode = await storeChecks(store, checks);
      if (exitCode === EXIT.OK) {
        const c = await tokenFloorCheck(store, highWater, values['fence-lease']);
        if (c !== undefined) checks.push(c);
        const r = await restoreCheck(store, c);
        if (r !== undefined) checks.push(r);
      }
    } finally {
      await store.close();
    }
  }
  if (exitCode === EXIT.OK && checks.some((c) => c.status === 'fail')) exitCode = EXIT.FAILED;

  if (values.json === true) {
    out(toJson({ ok: exitCode === EXIT.OK, exitCode, store: description, checks }));
  } else {
    for (const c of checks) out(`${c.status.padEnd(5)} ${c.check.padEnd(14)} ${escapeControls(c.detail)}`);
    const fails = checks.filter((c) => c.status === 'fail').length;
    const warns = checks.filter((c) => c.status === 'warn').length;
    out(fails === 0 ? `doctor: no failures${warns > 0 ? ` (${warns} warning${warns > 1 ? 's' : ''})` : ''}` : `doctor: ${fails} check${fails > 1 ? 's' : ''} failed`);
  }
  return exitCode;
}

/** Reachability, schema, clock skew and the store's own settings. Returns EXIT.STORE when the store does not answer. */
async function storeChecks(store: LeaseStore, checks: Check[]): Promise<number> {
  // Several clock reads: the first pays for the connection; the fastest bounds the skew best.
  const samples: { rtt: number; skew: number }[] = [];
  let connectMs = 0;
  for (let i = 0; i < 5; i++) {
    const wall0 = Date.now();
    const t0 = performance.now();
    try {
      const storeNow = await store.now();
      const rtt = performance.now() - t0;
      if (i === 0) connectMs = rtt;
      // The store read its clock somewhere in the round trip; assume the middle.
      samples.push({ rtt, skew: storeNow - (wall0 + rtt / 2) });
    } catch (e) {
      if (e instanceof SchemaError) break; // it answered: reachable
      checks.push({ check: 'store', status: 'fail', detail: `${store.description}: ${cliMessage(e)}` });
      checks.push({ check: 'schema', status: 'skip', detail: 'store unreachable' });
      checks.push({ check: 'clock-skew', status: 'skip', detail: 'store unreachable' });
      return e instanceof StoreUnavailableError || !(e instanceof ConfigError) ? EXIT.STORE : EXIT.USAGE;
    }
  }
  const warm = samples.slice(1).map((s) => s.rtt).sort((a, b) => a - b);
  const latency = warm[Math.floor(warm.length / 2)] ?? connectMs;
  checks.push({
    check: 'store',
    status: 'ok',
    detail: `${store.description} answers in ${latency.toFixed(1)}ms (first call ${connectMs.toFixed(1)}ms)`,
    latencyMs: Number(latency.toFixed(2)),
    firstCallMs: Number(connectMs.toFixed(2)),
  });

  try {
    const s = await store.schemaStatus();
    if (s.current === s.expected) checks.push({ check: 'schema', status: 'ok', detail: `version ${s.current}`, current: s.current, expected: s.expected });
    else if (s.current === 0) {
      checks.push({ check: 'schema', status: 'fail', detail: 'leasehold\'s tables do not exist; run `leasehold migrate` with the same --store', current: 0, expected: s.expected });
    } else if (s.current < s.expected) {
      checks.push({ check: 'schema', status: 'fail', detail: `version ${s.current}, this leasehold needs ${s.expected}; run \`leasehold migrate\``, current: s.current, expected: s.expected });
    } else {
      checks.push({ check: 'schema', status: 'fail', detail: `version ${s.current} is newer than this leasehold (${s.expected}); upgrade leasehold`, current: s.current, expected: s.expected });
    }
  } catch (e) {
    checks.push({ check: 'schema', status: 'fail', detail: errorMessage(e) });
  }

  const best = samples.reduce<{ rtt: number; skew: number } | undefined>((a, b) => (a === undefined || b.rtt < a.rtt ? b : a), undefined);
  if (best === undefined) {
    checks.push({ check: 'clock-skew', status: 'skip', detail: 'the store did not report its clock' });
  } else {
    const skew = Math.round(best.skew);
    const pm = Math.ceil(best.rtt / 2);
    const dir = skew >= 0 ? 'ahead of' : 'behind';
    const detail = `store clock ${formatMs(Math.abs(skew))} ${dir} this host (±${pm}ms)`;
    checks.push({
      check: 'clock-skew',
      status: Math.abs(skew) - pm > SKEW_WARN_MS ? 'warn' : 'ok',
      detail:
        Math.abs(skew) - pm > SKEW_WARN_MS
          ? `${detail}; expiry is judged by the store's clock alone, but timestamps in logs will disagree: check NTP`
          : detail,
      skewMs: skew,
      uncertaintyMs: pm,
    });
  }
  // Settings that break a promise without failing any call (Redis eviction): the store judges
  // its own, since only it knows its key layout.
  try {
    for (const c of (await store.checkSettings?.()) ?? []) checks.push({ ...c });
  } catch (e) {
    checks.push({ check: 'settings', status: 'warn', detail: `the ${store.kind} store could not check its settings: ${errorMessage(e)}` });
  }
  return EXIT.OK;
}

function parseHighWater(raw: string | undefined, lease: string | undefined): bigint | undefined {
  if (lease !== undefined && raw === undefined) throw usageError('--fence-lease needs --fence-high-water N (the mark to compare with that lease\'s next token)');
  if (raw === undefined) return undefined;
  if (!/^\d{1,20}$/.test(raw.trim())) {
    throw usageError(`--fence-high-water must be a whole number (a fenced resource's highest accepted token), got ${JSON.stringify(raw)}`);
  }
  return BigInt(raw.trim());
}

/**
 * A fence only ever accepts tokens the store issued, so a high-water mark at or above the
 * store's next token means the store lost its history (a wiped etcd, a Redis restored from an
 * old dump): safe, since the fence refuses everything, but no term will get a write through.
 * Skipped when there is nothing to compare (no --fence-high-water, no fence rows).
 */
async function tokenFloorCheck(store: LeaseAdmin, given: bigint | undefined, lease: string | undefined): Promise<Check | undefined> {
  if (store.nextToken === undefined) {
    return given === undefined ? undefined : { check: 'token-floor', status: 'skip', detail: `the ${store.kind} store cannot say what its next token is` };
  }
  try {
    const marks: { source: string; token: bigint }[] = [];
    if (given !== undefined) marks.push({ source: '--fence-high-water', token: given });
    for (const m of (await store.fenceHighWater?.({ limit: 1 })) ?? []) marks.push({ source: `fence "${m.resource}"`, token: m.token });
    if (marks.length === 0) return undefined;
    let next: bigint;
    let of: string;
    if (lease !== undefined) {
      next = await store.nextToken({ name: lease });
      of = `lease "${lease}"`;
    } else {
      // The highest token any lease would get next: a mark above even that was never issued here.
      next = await store.nextToken();
      for (const l of await store.list()) if (l.token + 1n > next) next = l.token + 1n;
      of = 'any lease';
    }
    const top = marks.reduce((a, b) => (b.token > a.token ? b : a));
    const extra = { highWater: top.token.toString(), nextToken: next.toString() };
    if (top.token >= next) {
      return {
        check: 'token-floor',
        status: 'fail',
        detail:
          `${top.source} has accepted token ${top.token}, but the next token for ${of} is only ${next}: every write of a new term ` +
          `will be fenced (the store lost its history). Run \`leasehold migrate --min-token ${top.token}\` with the same --store`,
        ...extra,
      };
    }
    return { check: 'token-floor', status: 'ok', detail: `highest mark ${top.token} (${top.source}) is below the next token for ${of} (${next})`, ...extra };
  } catch (e) {
    return { check: 'token-floor', status: 'fail', detail: errorMessage(e) };
  }
}

/**
 * A store restored from an older backup issues tokens again, and a fence accepts one equal to its
 * high-water mark, so the token-floor comparison alone can pass on a restored store. The store
 * refuses to grant until `migrate --min-token`; this says so, with the N to use when it is known.
 */
async function restoreCheck(store: LeaseAdmin, floor: Check | undefined): Promise<Check | undefined> {
  if (store.restoreCheck === undefined) return undefined;
  try {
    const r = await store.restoreCheck();
    if (!r.restored) return { check: 'restore', status: 'ok', detail: r.detail };
    const marks = [r.seenToken, typeof floor?.['highWater'] === 'string' ? BigInt(floor['highWater']) : undefined].filter((t): t is bigint => t !== undefined);
    const n = marks.length === 0 ? undefined : marks.reduce((a, b) => (b > a ? b : a));
    const how =
      n === undefined
        ? 'run `leasehold migrate --min-token N` with the same --store, N at least the highest token any fenced resource has accepted (pass it as --fence-high-water N to check)'
        : `run \`leasehold migrate --min-token ${n}\` with the same --store (or higher: N must be at least every fenced resource's high-water mark)`;
    return { check: 'restore', status: 'fail', detail: `${r.detail}. To resume, ${how}`, ...(n === undefined ? {} : { minToken: n.toString() }) };
  } catch (e) {
    return { check: 'restore', status: 'fail', detail: errorMessage(e) };
  }
}

/** The LEASEHOLD_* variables `run` would read, checked the way `run` checks them. */
function configCheck(): Check {
  const env = process.env;
  const args = env['LEASEHOLD_NAME'] === undefined || env['LEASEHOLD_NAME'] === '' ? ['--name', 'doctor', '--', 'true'] : ['--', 'true'];
  try {
    const s = parseRunArgs(args, env);
    if (s === 'help') throw new Error('unreachable');
    const set = ['LEASEHOLD_STORE', 'LEASEHOLD_SCHEMA', 'LEASEHOLD_NAME', 'LEASEHOLD_TTL', 'LEASEHOLD_RENEW', 'LEASEHOLD_GRACE', 'LEASEHOLD_WAIT'].filter(
      (k) => env[k] !== undefined && env[k] !== '',
    );
    const wait = s.wait === true ? 'forever' : s.wait === false ? 'no' : formatMs(s.wait);
    return {
      check: 'config',
      status: 'ok',
      detail:
        `run defaults: ttl ${formatMs(s.timing.ttlMs)}, renew ${formatMs(s.timing.renewMs)}, grace ${formatMs(s.graceMs)}, wait ${wait}` +
        ` (${set.length === 0 ? 'no LEASEHOLD_* variables set' : `from ${set.join(', ')}`})`,
      ttlMs: s.timing.ttlMs,
      renewMs: s.timing.renewMs,
      graceMs: s.graceMs,
    };
  } catch (e) {
    return { check: 'config', status: 'fail', detail: errorMessage(e) };
  }
}

function defaultStoreCheck(): Check {
  const path = defaultStoreUrl().replace(/^sqlite:/, '');
  const { ok, dir } = canCreate(path);
  return ok
    ? { check: 'default-store', status: 'ok', detail: `${path} is writable`, path }
    : { check: 'default-store', status: 'warn', detail: `${path} cannot be created (${dir} is not writable); set XDG_STATE_HOME or LEASEHOLD_STORE`, path };
}

function setprivCheck(): Check {
  const p = findSetpriv();
  return p === undefined
    ? {
        check: 'setpriv',
        status: 'warn',
        detail: 'setpriv not found: a runner killed with SIGKILL would leave its command running; install util-linux (apt-get install util-linux)',
      }
    : { check: 'setpriv', status: 'ok', detail: `${p} (the command dies with its runner)`, path: p };
}

