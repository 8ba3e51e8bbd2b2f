/**
 * `leasehold demo`: fencing tokens shown with real processes. Three workers contend for one
 * lease and write rows through a fence; the demo freezes the leader past its TTL (SIGSTOP),
 * thaws it to show its stale write fenced, kills the next leader (SIGKILL), stops the rest,
 * and checks what the store and the resource recorded. Exit 0 only if every claim held.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type Database from 'better-sqlite3';
import { errorMessage } from '../core/errors.js';
import { EXIT, exitCodeFor, resolveStore } from './common.js';
import { STORE_FLAGS, defineCommand, helpText, parseCommand, type ValuesOf } from './flags.js';
import { embeddedDriver, openStore } from '../backends/index.js';
import type { LeaseStore } from '../backends/store.js';
import { checkClaims, timeline, type DemoFacts } from '../demo/claims.js';
import { Crew, DemoStepError, type WorkerProc } from '../demo/crew.js';
import { DEMO_TABLE, type Report, type ReportOf } from '../demo/protocol.js';
import { openResource, readWrites } from '../demo/resource.js';

const TTL_MS = 2000;
const RENEW_MS = 600;
const FREEZE_MS = 3500;
const LETTERS = 'ABCDEFGH';

export const DEMO_SPEC = defineCommand({
  name: 'demo',
  summary: "Watch a frozen leader's stale write get fenced, on the embedded default store.",
  about: `Starts N (default 3) worker processes contending for one lease, each writing rows through a
fence. Freezes the leader past its TTL, shows its stale write fenced, kills the next leader,
stops the rest, and prints a timeline and the claims it checked. Takes about 15 seconds.`,
  flags: {
    // No --schema: the workers open the store from its URL alone (use ?schema= for PostgreSQL).
    store: STORE_FLAGS.store,
    'store-file': STORE_FLAGS['store-file'],
    workers: { type: 'string', value: 'N', help: 'how many workers, 2-8', default: '3' },
  },
  footer: 'Exit status: 0 if every claim held, 1 if not, 2 for a usage error.',
});

const USAGE = `${helpText(DEMO_SPEC)}\n`;

/** Runs `leasehold demo ...`; resolves with the exit code. */
export async function demoCommand(argv: string[]): Promise<number> {
  let values: ValuesOf<typeof DEMO_SPEC.flags>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseCommand(DEMO_SPEC, argv));
    if (positionals.length > 0) throw new Error(`demo takes no arguments, got ${JSON.stringify(positionals[0])}`);
  } catch (err) {
    process.stderr.write(`leasehold demo: ${errorMessage(err)}\n\n${USAGE}`);
    return EXIT.USAGE;
  }
  if (values.help === true) {
    process.stdout.write(USAGE);
    return 0;
  }
  const workers = Number(values.workers ?? 3);
  if (!Number.isInteger(workers) || workers < 2 || workers > LETTERS.length) {
    process.stderr.write(`leasehold demo: --workers must be a whole number from 2 to ${LETTERS.length} (one to freeze, one to take over)\n`);
    return EXIT.USAGE;
  }
  return runDemo(resolveStore(values).url, workers);
}

async function runDemo(url: string, workerCount: number): Promise<number> {
  const out = (line = ''): void => void process.stdout.write(`${line}\n`);
  const t0 = Date.now();
  const stamp = (at: number): string => `+${((at - t0) / 1000).toFixed(2)}s`.padStart(7);
  // Narration, wrapped so it reads in a 100-column terminal: "  +1.23s  text..." with a hanging indent.
  const say = (msg: string, at = Date.now()): void => out(wrap(`${stamp(at)}  ${msg}`, 100, ' '.repeat(9)));
  const secs = (ms: number): string => `${(ms / 1000).toFixed(ms % 1000 === 0 ? 0 : 2)}s`;

  const interrupt = new AbortController();
  const onSignal = (sig: NodeJS.Signals): void => interrupt.abort(new DemoStepError(`interrupted by ${sig}`));
  const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  const crew = new Crew(fileURLToPath(new URL('../demo/worker.js', import.meta.url)), interrupt.signal);
  // Whatever happens, no worker outlives the demo.
  const onExit = (): void => crew.killAll();
  for (const sig of SIGNALS) process.on(sig, onSignal);
  process.on('exit', onExit);

  const name = `demo-${randomBytes(4).toString('hex')}`;
  let store: LeaseStore | undefined;
  let db: Database.Database | undefined;
  let tmp: string | undefined;
  const facts: DemoFacts = { t0, history: [], rows: [], reports: crew.reports, workerOf: () => '?' };
  let failure: Error | undefined;

  try {
    // The resource is a SQLite file whatever the store is, so its driver is checked before the
    // store is opened: a refusal must not leave leasehold's tables in the user's database.
    // (A SQLite store fails to open with the driver's own line, which fits that case.)
    try {
      if (!/^sqlite:/i.test(url)) embeddedDriver().probe();
    } catch (err) {
      process.stderr.write(
        `leasehold demo: the demo's resource is a SQLite file whatever --store names, and ${errorMessage(err).replace(/^the SQLite store needs/, 'it needs').replace(/, or use another store.*$/, '')}\n`,
      );
      return exitCodeFor(err);
    }
    try {
      store = await openStore(url);
    } catch (err) {
      process.stderr.write(`leasehold demo: cannot open the store: ${errorMessage(err)}\n`);
      return exitCodeFor(err);
    }
    // The embedded store migrates itself on open. A server store gets leasehold's tables only
    // if it has none: upgrading an existing schema is `leasehold migrate`'s job, not a demo's.
    let schema = await store.schemaStatus();
    const migrated = schema.current === 0;
    if (migrated) schema = await store.migrate();
    if (schema.current !== schema.expected) {
      process.stderr.write(
        `leasehold demo: ${store.description} has leasehold schema ${schema.current}, this leasehold needs ${schema.expected}; run \`leasehold migrate\`\n`,
      );
      return EXIT.STORE;
    }
    let resource: string;
    if (store.kind === 'sqlite') {
      const file = embeddedDriver().fileOf(store);
      if (file === undefined) {
        process.stderr.write('leasehold demo: an in-memory SQLite store cannot be shared between processes; use a file (sqlite:/path/demo.db)\n');
        return EXIT.USAGE;
      }
      resource = file;
    } else {
      tmp = mkdtempSync(join(tmpdir(), 'leasehold-demo-'));
      resource = join(tmp, 'resource.db');
    }
    db = openResource(resource);

    out('leasehold demo: fencing tokens, shown with real processes');
    out();
    if (migrated) out(`(created leasehold's tables in ${store.description})`);
    out(`  store     ${store.description}: its clock, not the workers', decides when a term has expired`);
    out(`  lease     "${name}", TTL ${secs(TTL_MS)}, renewed every ${RENEW_MS}ms`);
    out(`  resource  table ${DEMO_TABLE} in ${tmp === undefined ? 'the same file' : resource}, fenced as "${name}"`);
    out();
    out('Each worker loops: read the token, work ~250ms, write a row carrying that token. It does not');
    out('re-check the lease before writing. That is the point: the fence must make a stale leader harmless.');
    out();

    try {
      await stepThrough();
    } catch (err) {
      failure = err instanceof Error ? err : new Error(String(err));
      say(`✗ the demo could not finish: ${failure.message}`);
    } finally {
      const left = crew.running.map((w) => w.id);
      if (left.length > 0) {
        const s = await crew.stopAll(3000);
        facts.stopped ??= { at: Date.now(), workers: left, clean: s.clean, killed: s.killed };
        say(`Stopped ${left.join(', ')} (SIGCONT, SIGTERM${s.killed.length > 0 ? `, then SIGKILL for ${s.killed.join(', ')}` : ''})`);
      }
    }
    if (interrupt.signal.aborted) return 130; // 128 + SIGINT, as a shell reports an interrupted command

    try {
      facts.history = await store.history({ name, limit: 1000 });
    } catch (err) {
      out(`✗ could not read the store's history of "${name}": ${errorMessage(err)}`);
    }
    facts.rows = readWrites(db, name);
    out();
    out(`Timeline of lease "${name}" (terms by the store's clock; rows from ${DEMO_TABLE} WHERE run = '${name}')`);
    for (const line of timeline(facts)) out(line);
    out();
    out('Claims checked');
    const claims = checkClaims(facts);
    for (const c of claims) out(wrap(`  ${c.held ? '✓' : '✗'} ${c.label}: ${c.detail}`, 100, ' '.repeat(8)));
    const failed = claims.filter((c) => !c.held).length;
    out();
    if (failed === 0 && failure === undefined) {
      out(`All ${claims.length} claims held. (${stamp(Date.now()).trim()})`);
      return EXIT.OK;
    }
    out(failure === undefined ? `${failed} of ${claims.length} claims did not hold.` : `The demo did not finish; ${failed} of ${claims.length} claims did not hold.`);
    return EXIT.FAILED;
  } catch (err) {
    process.stderr.write(`leasehold demo: ${errorMessage(err)}\n`);
    return exitCodeFor(err);
  } finally {
    crew.killAll();
    for (const sig of SIGNALS) process.off(sig, onSignal);
    process.off('exit', onExit);
    db?.close();
    await store?.close();
    if (tmp !== undefined) rmSync(tmp, { recursive: true, force: true });
  }

  // ---- the steps ------------------------------------------------------------------------------

  async function stepThrough(): Promise<void> {
    const args = ['--lease', name, '--resource', db!.name, '--run', name, '--ttl', String(TTL_MS), '--renew', String(RENEW_MS)];
    const started: WorkerProc[] = [];
    for (let i = 0; i < workerCount; i++) started.push(crew.start(LETTERS[i]!, args, { LEASEHOLD_STORE: url }));
    say(`Started ${started.map((w) => `worker ${w.id} (pid ${w.pid})`).join(', ')}`);
    const holders = new Map<string, string>();
    facts.workerOf = (holder) => {
      if (holder === null) return '-';
      for (const r of crew.reports) if ((r.type === 'ready' || r.type === 'identity' || r.type === 'acquired') && r.holder === holder) return r.worker;
      return holders.get(holder) ?? holder.slice(0, 12);
    };

    // 1. A leader, and a few of its writes accepted.
    const first = await crew.waitFor('any worker to acquire the lease', 20_000, () => find('acquired', () => true));
    const leader = crew.workers.get(first.worker)!;
    const token1 = BigInt(first.token);
    say(`Worker ${leader.id} leads with token ${token1}; the others wait for the store to say the lease is free`, first.at);
    const third = await crew.waitFor(`3 accepted writes by ${leader.id}`, 10_000, () =>
      crew.reports.filter((r) => r.type === 'accepted' && r.worker === leader.id && r.token === first.token)[2],
    );
    say(`${leader.id} has 3 writes accepted with token ${token1}`, third.at);

    // 2. Freeze it in the middle of a unit of work, past its TTL.
    const frozen = await freezeMidUnit(leader);
    const frozenAt = frozen.at;
    facts.frozen = { worker: leader.id, token: token1, seq: frozen.seq, at: frozenAt };
    say(
      `Freezing worker ${leader.id} (pid ${leader.pid}), the leader with token ${token1}, for ${secs(FREEZE_MS)}: longer than the ${secs(TTL_MS)} TTL. ` +
        `It is in the middle of unit #${frozen.seq}, holding token ${token1}.`,
      frozenAt,
    );
    say(`While frozen, ${leader.id} cannot renew, and from inside ${leader.id} no time passes at all.`, frozenAt);

    // 3. Takeover with a higher token, and a first write under it.
    const takeover = await crew.waitFor(`another worker to take over from frozen ${leader.id}`, TTL_MS * 4 + 4000, () =>
      find('acquired', (r) => r.worker !== leader.id && BigInt(r.token) > token1),
    );
    const second = crew.workers.get(takeover.worker)!;
    const token2 = BigInt(takeover.token);
    say(
      `Worker ${second.id} took over with token ${token2}, ${secs(takeover.at - frozenAt)} after the freeze: by the store's clock ` +
        `${leader.id}'s term (${secs(TTL_MS)} from its last renewal) ran out, so the store granted a new term with a larger token. Nobody asked ${leader.id}.`,
      takeover.at,
    );
    const w2 = await crew.waitFor(`a write by ${second.id} with token ${token2}`, 5000, () =>
      find('accepted', (r) => r.worker === second.id && r.token === takeover.token),
    );
    say(`${second.id}'s write #${w2.seq} with token ${token2} accepted: the fence now holds ${token2} as its high-water mark`, w2.at);
    const left = frozenAt + FREEZE_MS - Date.now();
    if (left > 0) await crew.sleep(left);

    // 4. Thaw it: the unit in flight writes with the stale token, and the fence refuses it.
    const thawedAt = Date.now();
    crew.send(leader, 'SIGCONT');
    facts.frozen.thawedAt = thawedAt;
    say(
      `Thawing worker ${leader.id} (SIGCONT) after ${secs(thawedAt - frozenAt)}. Nothing inside it noticed the time pass: it woke believing ` +
        `it still led, and unit #${frozen.seq} carried on to its write with token ${token1}.`,
      thawedAt,
    );
    const outcome = await crew.waitFor(`${leader.id}'s write #${frozen.seq} after thawing`, 5000, () =>
      crew.reports.find((r): r is ReportOf<'accepted' | 'fenced' | 'write-error'> =>
        (r.type === 'accepted' || r.type === 'fenced' || r.type === 'write-error') && r.worker === leader.id && r.seq === frozen.seq,
      ),
    );
    if (outcome.type === 'fenced') {
      say(
        `FENCED: ${leader.id}'s write #${frozen.seq} with token ${token1} was rejected by the fence, because the resource had already ` +
          `accepted token ${outcome.highWater ?? '?'}. The fence stopped it, not the lease; nothing was written.`,
        outcome.at,
      );
      say(
        outcome.leaseKnewLost
          ? `(${leader.id}'s lease object had noticed the lost term on waking, a moment before; the unit already in flight never asked it.)`
          : `(At that moment ${leader.id}'s lease object had not noticed the lost term either.)`,
        outcome.at,
      );
    } else if (outcome.type === 'accepted') {
      say(`✗ ${leader.id}'s stale write #${frozen.seq} with token ${token1} was ACCEPTED: the fence did not hold`, outcome.at);
    } else {
      say(`✗ ${leader.id}'s write #${frozen.seq} failed for another reason: ${outcome.message}`, outcome.at);
    }
    const lost = await crew.waitFor(`${leader.id} to notice it lost term ${token1}`, 5000, () =>
      find('lost', (r) => r.worker === leader.id && r.token === first.token),
    );
    say(`${leader.id}'s lease reported term ${token1} lost (${lost.reason}); ${leader.id} went back to waiting as a follower`, lost.at);

    // 5. Kill the current leader outright: the others must wait for its term to expire.
    if (find('lost', (r) => r.worker === second.id && r.token === takeover.token) !== undefined) {
      throw new DemoStepError(`${second.id} lost its term before it could be killed; the machine may be too loaded for a ${secs(TTL_MS)} TTL`);
    }
    const killedAt = Date.now();
    crew.send(second, 'SIGKILL');
    facts.killed = { worker: second.id, token: token2, at: killedAt };
    say(
      `Killing worker ${second.id} (pid ${second.pid}), the leader with token ${token2}, with SIGKILL: no release, no goodbye. ` +
        `The others must wait until its term expires by the store's clock.`,
      killedAt,
    );
    const third3 = await crew.waitFor(`a takeover after ${second.id} was killed`, TTL_MS * 4 + 4000, () =>
      find('acquired', (r) => r.worker !== second.id && BigInt(r.token) > token2),
    );
    const token3 = BigInt(third3.token);
    say(
      `Worker ${third3.worker} took over with token ${token3}, ${secs(third3.at - killedAt)} after the kill: ${second.id}'s term had run out ` +
        `by the store's clock, counted from ${second.id}'s last renewal before it died.`,
      third3.at,
    );
    const w3 = await crew.waitFor(`a write by ${third3.worker} with token ${token3}`, 5000, () =>
      find('accepted', (r) => r.worker === third3.worker && r.token === third3.token),
    );
    say(`${third3.worker}'s write #${w3.seq} with token ${token3} accepted`, w3.at);

    // 6. Stop the rest cleanly.
    const rest = crew.running.map((w) => w.id);
    const stopAt = Date.now();
    say(`Stopping ${rest.join(' and ')} (SIGTERM): each finishes its unit of work, releases the lease if it holds it, and exits`, stopAt);
    const s = await crew.stopAll(5000);
    facts.stopped = { at: stopAt, workers: rest, clean: s.clean, killed: s.killed };
    const exits = rest.map((id) => {
      const e = crew.workers.get(id)!.exit;
      return `${id} ${e?.code === 0 ? 'exited cleanly' : `ended with ${e?.signal ?? `code ${e?.code}`}`}`;
    });
    const rel = find('released', (r) => rest.includes(r.worker) && r.handedOver);
    say(`${exits.join(', ')}${rel === undefined ? '' : `; ${rel.worker} released token ${rel.token}`}`);
  }

  function find<K extends Report['type']>(type: K, pred: (r: ReportOf<K>) => boolean): ReportOf<K> | undefined {
    return crew.reports.find((r): r is ReportOf<K> => r.type === type && pred(r as ReportOf<K>));
  }

  /**
   * SIGSTOPs the leader right after it reports starting a unit of work, so the freeze lands
   * during the unit's ~250ms of "work", before its write. If the write still got out first
   * (a slow pipe on a loaded machine), thaw at once and try on the next unit.
   */
  async function freezeMidUnit(w: WorkerProc): Promise<{ seq: number; at: number }> {
    for (let attempt = 1; ; attempt++) {
      const from = crew.reports.length;
      const unit = await crew.waitFor(`${w.id} to start a unit of work`, 5000, () =>
        crew.reports.slice(from).find((r): r is ReportOf<'unit'> => r.type === 'unit' && r.worker === w.id),
      );
      crew.send(w, 'SIGSTOP');
      const at = Date.now();
      await crew.sleep(150); // anything written before the stop has reached us by now
      const done = crew.reports.some((r) => (r.type === 'accepted' || r.type === 'fenced') && r.worker === w.id && r.seq === unit.seq);
      if (!done) return { seq: unit.seq, at };
      crew.send(w, 'SIGCONT');
      if (attempt === 3) throw new DemoStepError(`could not freeze ${w.id} in the middle of a unit of work (3 tries); the machine may be overloaded`);
      say(`(the freeze landed just after ${w.id}'s write; thawed at once, trying again on its next unit)`);
    }
  }
}

/** Word-wraps one line to `width` columns, continuing with `indent`. */
function wrap(line: string, width: number, indent: string): string {
  const lines: string[] = [];
  let rest = line;
  while (rest.length > width) {
    const cut = rest.lastIndexOf(' ', width);
    if (cut <= indent.length) break;
    lines.push(rest.slice(0, cut));
    rest = indent + rest.slice(cut + 1).trimStart();
  }
  lines.push(rest);
  return lines.join('\n');
}
