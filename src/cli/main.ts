/**
 * The `leasehold` command line: dispatch, `--help`, `--version`, and the one place errors become
 * exit codes. Each command lives in its own file and returns its exit code; none calls
 * process.exit (bin/leasehold.js sets process.exitCode once main() resolves).
 *
 * Exit codes (also in `leasehold --help` and the README):
 *   0    success; for `run`, the command's own exit status (128 + N when killed by signal N)
 *   1    a check failed (`doctor`), nothing to revoke (`release`), or an unexpected error
 *   2    usage or configuration: unknown flag, missing `--`, bad duration, bad store URL,
 *        bad lease name, inconsistent timing (renew > ttl/2, grace too large)
 *   3    the store is unreachable, or its schema is missing/old (run `leasehold migrate`)
 *   75   `run` never became leader (`--no-wait`, or `--wait D` ran out)
 *   76   `run` lost the lease while the command was running; the command was killed
 */
import { readFileSync } from 'node:fs';
import { EXIT, err, errorLine, exitCodeFor, out } from './common.js';

export const USAGE = `leasehold: leases with fencing tokens for singleton work

Usage:
  leasehold run --name NAME [--store URL] [--ttl D] [--renew D] [--wait D | --no-wait]
                [--grace D] [--quiet] -- COMMAND [ARGS...]
  leasehold status [NAME] [--store URL] [--json]
  leasehold history [NAME] [--store URL] [--json] [--limit N]
  leasehold release NAME --force --reason TEXT [--store URL]
  leasehold migrate [--store URL] [--schema NAME] [--min-token N] [--json]
  leasehold doctor [--store URL] [--json] [--fence-high-water N [--fence-lease NAME]]
  leasehold demo
  leasehold help [COMMAND] | --help | --version

Every command that talks to a store also takes --schema NAME (PostgreSQL).

run       Contend for lease NAME; while leader, run COMMAND in its own process group with
          LEASEHOLD_NAME, LEASEHOLD_TOKEN, LEASEHOLD_HOLDER, LEASEHOLD_STORE and
          LEASEHOLD_IDEMPOTENCY_KEY (leasehold:NAME:TOKEN) in its environment. If the lease
          is lost, the group gets SIGTERM, then SIGKILL after --grace, so it is dead before
          the store hands the lease on. SIGTERM/SIGINT/SIGHUP are forwarded; the lease is
          released after COMMAND exits.
status    Every lease: state, holder, token, time to expiry by the store's clock.
history   Changes of holder (acquired, takeover, released, revoked) with the store's time.
release   Operator revocation: the holder stands down at its next renewal.
migrate   Create or upgrade the schema (PostgreSQL needs it; SQLite does it on open).
doctor    Store reachable, schema current, clock skew, configuration, setpriv.
demo      Watch a frozen leader's stale write get fenced, on the embedded default store.

Durations: 30s, 500ms, 2m, 1h, or whole milliseconds.
Store: --store > LEASEHOLD_STORE > sqlite:$XDG_STATE_HOME/leasehold/leasehold.db
       (~/.local/state/leasehold/ without XDG_STATE_HOME). postgres://user@host/db[?schema=S],
       sqlite:/path/file.db, redis://host:6379, etcd://host:2379.
Flags override environment: LEASEHOLD_STORE, LEASEHOLD_SCHEMA, LEASEHOLD_NAME, LEASEHOLD_TTL,
       LEASEHOLD_RENEW, LEASEHOLD_GRACE, LEASEHOLD_WAIT (a duration, or "forever"/"no").

Exit codes:
  0    success; for run, COMMAND's own status (128+N if killed by signal N)
  1    doctor found a failure; release found nothing to revoke; unexpected error
  2    usage or configuration error (one line on stderr says what to fix)
  3    store unreachable, or schema missing/old (run \`leasehold migrate\`)
  75   run: never became leader (--no-wait, or --wait ran out)
  76   run: lost the lease while COMMAND was running (COMMAND was killed)
`;

export function version(): string {
  try {
    // dist/src/cli/main.js -> package.json at the package root.
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

type Command = (argv: string[]) => Promise<number>;

/** Lazy imports: `leasehold status` need not load the runner, nor the demo. */
const COMMANDS: Record<string, () => Promise<Command>> = {
  run: async () => (await import('./run.js')).runCommand,
  status: async () => (await import('./status.js')).statusCommand,
  history: async () => (await import('./history.js')).historyCommand,
  release: async () => (await import('./release.js')).releaseCommand,
  migrate: async () => (await import('./migrate.js')).migrateCommand,
  doctor: async () => (await import('./doctor.js')).doctorCommand,
  demo: async () => (await import('./demo.js')).demoCommand,
};

/** Runs the CLI and resolves with the exit code. Never throws, never exits the process. */
export async function main(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === undefined || first === '--help' || first === '-h') {
    (first === undefined ? err : out)(USAGE.trimEnd());
    return first === undefined ? EXIT.USAGE : EXIT.OK;
  }
  if (first === '--version' || first === '-V' || first === 'version') {
    out(version());
    return EXIT.OK;
  }
  if (first === 'help') {
    const sub = rest[0];
    if (sub !== undefined && COMMANDS[sub] !== undefined) return main([sub, '--help']);
    out(USAGE.trimEnd());
    return EXIT.OK;
  }
  const load = COMMANDS[first];
  if (load === undefined) {
    const hint = first.startsWith('-') ? 'put the command first' : 'the commands are run, status, history, release, migrate, doctor, demo';
    err(`leasehold: unknown command ${JSON.stringify(first)}; ${hint} (see \`leasehold --help\`)`);
    return EXIT.USAGE;
  }
  try {
    const command = await load();
    return await command(rest);
  } catch (e) {
    err(errorLine(e, first));
    if (process.env['LEASEHOLD_DEBUG'] === '1' && e instanceof Error && e.stack !== undefined) err(e.stack);
    return exitCodeFor(e);
  }
}
