/** `leasehold cron` and `run --once-per` as subprocesses, on SQLite and PostgreSQL. */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import pg from 'pg';
import { makeTestStore, selectedStores, SIDE_BY_SIDE } from '../helpers/stores.js';
import { PG_URL, Sandbox, assertOneLineError, dropSchema, freshSchema, pgUrl, until } from '../cli/helpers.js';

const sb = new Sandbox('cron');
const schemas: string[] = [];
after(async () => {
  sb.cleanup();
  for (const s of schemas) await dropSchema(s);
});

/** A failed assertion must not leave replicas running (the test file would never end): SIGKILL what is left. */
function killLeft(...rs: { proc: import('node:child_process').ChildProcess }[]): void {
  for (const r of rs) if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGKILL');
}

function storeFor(kind: 'sqlite' | 'postgres'): string {
  if (kind === 'sqlite') return `sqlite:${sb.path(`${randomBytes(4).toString('hex')}.db`)}`;
  const s = freshSchema();
  schemas.push(s);
  return pgUrl(s);
}

void describe('leasehold cron: usage errors are exit 2 with one line', () => {
  const cases: Array<[string, string[], RegExp]> = [
    ['a bad expression', ['--schedule', '61 * * * *'], /not a cron expression/],
    ['an unknown zone', ['--schedule', '0 3 * * *', '--tz', 'Mars/Olympus'], /time zone "Mars\/Olympus" is unknown/],
    ['--schedule with --every', ['--schedule', '0 3 * * *', '--every', '1m'], /--schedule and --every contradict/],
    ['--tz with --every', ['--every', '1m', '--tz', 'UTC'], /--tz applies to --schedule/],
    ['neither', [], /needs --schedule EXPR or --every D/],
    ['a bad --catch-up', ['--every', '1m', '--catch-up', 'some'], /--catch-up "some" is not latest, all or none/],
    ['a bad --every', ['--every', 'soon'], /--every/],
    ['an expression that never fires (30 February)', ['--schedule', '0 0 30 2 *'], /never fires.*5 fields/],
    ['a 7-field expression (a year last)', ['--schedule', '0 0 0 1 1 * 2030'], /has 7 fields.*5 fields/],
  ];
  for (const [what, flags, pattern] of cases) {
    void it(what, async () => {
      const r = await sb.run(['cron', '--name', 'x', '--store', `sqlite:${sb.path('usage.db')}`, ...flags, '--', 'true']);
      assertOneLineError(r, 2, pattern);
    });
  }
});

void describe('leasehold cron history and cron ls: how the schedule is named', () => {
  void it('cron history --name NAME reads the same ledger as cron history NAME (the usage line offers both)', async () => {
    const store = `sqlite:${sb.path('history-name.db')}`;
    const job = sb.script('history-name.sh', 'true');
    assert.equal((await sb.run(['run', '--name', 'nightly', '--once-per', 'k1', '--store', store, '--', job])).code, 0);
    const byOperand = await sb.run(['cron', 'history', 'nightly', '--json', '--store', store]);
    const byFlag = await sb.run(['cron', 'history', '--name', 'nightly', '--json', '--store', store]);
    const byEnv = await sb.run(['cron', 'history', '--json', '--store', store], { LEASEHOLD_NAME: 'nightly' });
    for (const r of [byOperand, byFlag, byEnv]) assert.equal(r.code, 0, r.stderr);
    assert.deepEqual((JSON.parse(byOperand.stdout) as { slot: string }[]).map((r) => r.slot), ['k1']);
    assert.equal(byFlag.stdout, byOperand.stdout);
    assert.equal(byEnv.stdout, byOperand.stdout);
  });
  const cases: Array<[string, string[], RegExp]> = [
    ['history with two different names', ['history', 'a', '--name', 'b'], /"a" and --name "b" name two schedules/],
    ['history with no name at all', ['history'], /needs a schedule: leasehold cron history NAME, or --name NAME/],
    ['history with two operands', ['history', 'a', 'b'], /takes one lease name/],
    ['ls with an operand', ['ls', 'a'], /cron ls takes no operand/],
    ['an unknown subcommand', ['list'], /unexpected argument "list".*history and ls/],
  ];
  for (const [what, args, pattern] of cases) {
    void it(`${what}: exit 2, one line`, async () => {
      assertOneLineError(await sb.run(['cron', ...args, '--store', `sqlite:${sb.path('usage.db')}`], { LEASEHOLD_NAME: '' }), 2, pattern);
    });
  }
});

void describe('leasehold cron on redis, etcd and mysql', SIDE_BY_SIDE, () => {
  for (const kind of (['redis', 'etcd', 'mysql'] as const).filter((k) => selectedStores().includes(k))) {
    void describe(`on ${kind}`, { concurrency: 1 }, () => {
      void it('--once-per KEY on three hosts at once runs the command once; a failed KEY runs again', async () => {
        const ts = await makeTestStore(kind);
        try {
          const out = sb.path(`once-${kind}.log`);
          const job = sb.script(`once-${kind}.sh`, `echo "$LEASEHOLD_SLOT $LEASEHOLD_TOKEN" >> ${out}; sleep 0.3`);
          // TTL 10 s: nothing here waits for an expiry (every term ends by release), so the TTL
          // only bounds how long a renewal may go unanswered; under stress-ng --cpu 2 an etcd
          // renewal went 1.4 s unanswered and a 3 s term rightly stood down (exit 76).
          const args = ['run', '--name', 'minute-report', '--once-per', 'k1', '--busy-exit', '0', '--wait', '15s', '--ttl', '10s', '--store', ts.url, '--', job];
          const done = await Promise.all([0, 1, 2].map(() => sb.run(args)));
          for (const d of done) assert.equal(d.code, 0, d.stderr);
          assert.equal(sb.read(`once-${kind}.log`).trim().split('\n').length, 1, sb.read(`once-${kind}.log`));
          assert.equal(done.filter((d) => /already succeeded/.test(d.stderr)).length, 2);
          const fail = sb.script(`once-fail-${kind}.sh`, `echo "fail $LEASEHOLD_SLOT" >> ${out}; exit 3`);
          assert.equal((await sb.run(['run', '--name', 'minute-report', '--once-per', 'k2', '--store', ts.url, '--', fail])).code, 3);
          assert.equal((await sb.run(['run', '--name', 'minute-report', '--once-per', 'k2', '--store', ts.url, '--', job])).code, 0);
          const h = await sb.run(['cron', 'history', 'minute-report', '--json', '--store', ts.url]);
          assert.equal(h.code, 0, h.stderr);
          const rows = JSON.parse(h.stdout) as { slot: string; status: string; reason: string | null }[];
          assert.deepEqual(rows.map((r) => [r.slot, r.status]).sort(), [['k1', 'succeeded'], ['k2', 'succeeded']]);
          assert.match(rows.find((r) => r.slot === 'k2')!.reason ?? '', /rerun: failed in term/);
        } finally {
          await ts.cleanup();
        }
      });

      void it('cron --every 1s: two replicas, each slot in the ledger once', async () => {
        const ts = await makeTestStore(kind);
        try {
          const out = sb.path(`cron-${kind}.log`);
          const job = sb.script(`cron-${kind}.sh`, `echo "$LEASEHOLD_SLOT" >> ${out}`);
          const args = ['cron', '--name', 'tick', '--every', '1s', '--ttl', '3s', '--store', ts.url, '--', job];
          const replicas = [sb.start(args), sb.start(args)];
          const ranCount = (): number => (existsSync(out) ? sb.read(`cron-${kind}.log`).trim().split('\n').length : 0);
          // The first slot waits on two Node processes starting and connecting: not what is tested
          // (CI on a host with a load average of 20 took over 15 s for that on etcd).
          await until('the first slot ran', () => ranCount() >= 1, 60_000);
          // Then each slot within its period, or within a TTL when it finds a term still held
          // (per-slot: the last slot's term is released after its completion): 2 x (1 s + 3 s).
          await until('two more slots ran', () => ranCount() >= 3, 2 * (1000 + 3000));
          await until('both replicas have scheduled the cron (a SIGTERM before its handler is installed kills a loading one)', () => replicas.every((r) => r.stderr.includes('scheduled:')), 60_000);
          for (const r of replicas) r.proc.kill('SIGTERM');
          for (const d of await Promise.all(replicas.map((r) => r.done))) assert.equal(d.code, 143, d.stderr);
          const ran = sb.read(`cron-${kind}.log`).trim().split('\n');
          // A replica whose event loop stalls past its term's deadline stands down while its job runs
          // (CI on MySQL, under the suite's own load: 'the term ended while the job ran (suspended)'),
          // and says so on stderr; that slot is recorded interrupted, owed, and may be rerun by the
          // next term. Only such a slot may run again or end other than succeeded.
          const stoodDown = new Set(replicas.flatMap((r) => [...r.stderr.matchAll(/slot (\S+): interrupted: the term ended while the job ran/g)].map((m) => m[1]!)));
          const twice = ran.filter((slot, i) => ran.indexOf(slot) !== i);
          assert.deepEqual(twice.filter((slot) => !stoodDown.has(slot)), [], `a slot ran twice: ${ran.join(', ')}`);
          const h = await sb.run(['cron', 'history', 'tick', '--json', '--store', ts.url]);
          assert.equal(h.code, 0, `cron history: ${h.stderr}`);
          const rows = JSON.parse(h.stdout) as { slot: string; status: string }[];
          assert.equal(new Set(rows.map((r) => r.slot)).size, rows.length);
          for (const slot of ran) {
            const status = rows.find((r) => r.slot === slot)?.status;
            if (status === 'interrupted' && stoodDown.has(slot)) continue;
            assert.equal(status, 'succeeded', `${slot}: ${JSON.stringify(rows)}`);
          }
        } finally {
          await ts.cleanup();
        }
      });
    });
  }
});

void describe('leasehold cron on sqlite and postgres', SIDE_BY_SIDE, () => {
  for (const kind of (['sqlite', 'postgres'] as const).filter((k) => selectedStores().includes(k))) {
    void describe(`on ${kind}`, { concurrency: 1 }, () => {
      void it('--once-per KEY on three hosts at once runs the command once; the others exit --busy-exit', async () => {
        const store = storeFor(kind);
        if (kind === 'postgres') assert.equal((await sb.run(['migrate', '--store', store])).code, 0);
        const out = sb.path(`once-${kind}.log`);
        const job = sb.script(`once-${kind}.sh`, `echo "$LEASEHOLD_SLOT $LEASEHOLD_TOKEN" >> ${out}; sleep 0.3`);
        const runs = [0, 1, 2].map(() =>
          sb.run(['run', '--name', 'minute-report', '--once-per', '2026-12-01T03:00', '--busy-exit', '0', '--wait', '10s', '--ttl', '3s', '--store', store, '--', job]),
        );
        const done = await Promise.all(runs);
        for (const d of done) assert.equal(d.code, 0, d.stderr);
        assert.deepEqual(sb.read(`once-${kind}.log`).trim().split('\n').length, 1, sb.read(`once-${kind}.log`));
        assert.equal(done.filter((d) => /already succeeded/.test(d.stderr)).length, 2);
        const h = await sb.run(['cron', 'history', 'minute-report', '--json', '--store', store]);
        const rows = JSON.parse(h.stdout) as { slot: string; status: string; slotAt: string | null }[];
        assert.deepEqual(rows.map((r) => [r.slot, r.status, r.slotAt]), [['2026-12-01T03:00', 'succeeded', null]]);
        // Without --busy-exit the default is 75.
        const again = await sb.run(['run', '--name', 'minute-report', '--once-per', '2026-12-01T03:00', '--store', store, '--', job]);
        assert.equal(again.code, 75);
      });

      void it('cron ls lists each schedule with its last slot, last success and lease; a --once-per key is not a schedule', async (t) => {
        const store = storeFor(kind);
        if (kind === 'postgres') assert.equal((await sb.run(['migrate', '--store', store])).code, 0);
        const empty = await sb.run(['cron', 'ls', '--json', '--store', store]);
        assert.equal(empty.code, 0, empty.stderr);
        assert.deepEqual(JSON.parse(empty.stdout), []);
        const ok = sb.script(`ls-ok-${kind}.sh`, 'true');
        const fail = sb.script(`ls-fail-${kind}.sh`, 'exit 4');
        assert.equal((await sb.run(['run', '--name', 'once', '--once-per', 'k1', '--store', store, '--', ok])).code, 0);
        const a = sb.start(['cron', '--name', 'good', '--every', '1s', '--ttl', '3s', '--store', store, '--', ok]);
        const b = sb.start(['cron', '--name', 'bad', '--schedule', '* * * * * *', '--tz', 'Europe/Berlin', '--catch-up', 'none', '--ttl', '3s', '--store', store, '--', fail]);
        t.after(() => killLeft(a, b));
        await until('two slots each', () => (a.stderr.match(/: succeeded/g) ?? []).length >= 2 && (b.stderr.match(/: failed/g) ?? []).length >= 2, 15_000);
        for (const r of [a, b]) r.proc.kill('SIGTERM');
        for (const d of await Promise.all([a.done, b.done])) assert.equal(d.code, 143, d.stderr);
        const ls = await sb.run(['cron', 'ls', '--json', '--store', store]);
        assert.equal(ls.code, 0, ls.stderr);
        type Summary = {
          name: string;
          lease: { state: string };
          last: { status: string; slotAt: string };
          lastSuccess: { slot: string } | null;
          recent: Record<string, number>;
          storeNow: string;
          schedule: { description: string; expression: string | null; timeZone: string | null; everyMs: number | null; mode: string; catchUp: string; catchUpWindowMs: number; catchingUp: unknown } | null;
          nextDue: string | null;
        };
        const list = JSON.parse(ls.stdout) as Summary[];
        assert.deepEqual(list.map((s) => s.name), ['bad', 'good'], 'the --once-per lease "once" is not listed');
        const [bad, good] = list as [Summary, Summary];
        // What ls says of each is what the ledger holds: its newest row, its newest success. The SIGTERM
        // may land while a slot's job runs (CI: 'bad' fires every second), and then that slot is the
        // newest row, recorded interrupted (owed); either way ls must say what the ledger says.
        for (const s of [good, bad]) {
          const h = await sb.run(['cron', 'history', s.name, '--json', '--limit', '1000', '--store', store]);
          assert.equal(h.code, 0, h.stderr);
          const rows = JSON.parse(h.stdout) as Array<{ slot: string; slotAt: string; status: string }>;
          const newest = rows.reduce((x, y) => (Date.parse(y.slotAt) > Date.parse(x.slotAt) ? y : x));
          assert.deepEqual([s.last.status, Date.parse(s.last.slotAt)], [newest.status, Date.parse(newest.slotAt)], `${s.name}: ls's last slot is the ledger's newest row`);
          // Any final status: on a loaded host (CI: SQLite, the test 6x its quiet time) a job that ran
          // past the next slot has that slot recorded 'skipped' (overlap) by its own term, and that is
          // then the newest row. Never 'claimed': a stopped replica records its claimed slot interrupted.
          assert.ok(['succeeded', 'failed', 'interrupted', 'skipped'].includes(s.last.status), `${s.name}: last ${s.last.status}`);
        }
        const lastGood = (JSON.parse((await sb.run(['cron', 'history', 'good', '--json', '--limit', '1000', '--store', store])).stdout) as Array<{ slot: string; slotAt: string; status: string }>)
          .filter((r) => r.status === 'succeeded')
          .sort((x, y) => Date.parse(x.slotAt) - Date.parse(y.slotAt))
          .at(-1)!;
        assert.equal(Date.parse(good.lastSuccess!.slot), Date.parse(lastGood.slotAt), 'good: the last success is the newest succeeded row');
        assert.ok((good.recent['succeeded'] ?? 0) >= 2, JSON.stringify(good));
        assert.ok((bad.recent['failed'] ?? 0) >= 2, JSON.stringify(bad));
        assert.equal(bad.lastSuccess, null);
        for (const s of list) assert.equal(s.lease.state, 'free', 'both stopped: per-slot holds nothing between slots');
        // The schedule's record, as its replica wrote it, and the next slot from it by the store's clock.
        assert.deepEqual(good.schedule, { description: 'every 1s', expression: null, timeZone: null, everyMs: 1000, mode: 'per-slot', catchUp: 'latest', catchUpWindowMs: 3_600_000, catchingUp: null, writtenBy: (good.schedule as { writtenBy: unknown } | null)?.writtenBy });
        assert.deepEqual(
          { expression: bad.schedule?.expression, timeZone: bad.schedule?.timeZone, catchUp: bad.schedule?.catchUp },
          { expression: '* * * * * *', timeZone: 'Europe/Berlin', catchUp: 'none' },
        );
        for (const s of list) {
          const ahead = Date.parse(s.nextDue!) - Date.parse(s.storeNow);
          assert.ok(ahead > 0 && ahead <= 1000, `${s.name}: next due ${s.nextDue}, the second after the store's now ${s.storeNow}`);
        }
        const text = await sb.run(['cron', 'ls', '--store', store]);
        assert.equal(text.code, 0, text.stderr);
        assert.match(text.stdout, /^NAME\s+SCHEDULE\s+NEXT DUE\s+LAST SLOT\s+OUTCOME/);
        // Its outcome is the ledger's newest row, as --json said (a SIGTERM during a job: interrupted).
        assert.match(text.stdout, new RegExp(String.raw`\nbad\s+\* \* \* \* \* \* \(Europe\/Berlin\), per-slot, catch-up none 1h00m\s+\S+\s+\S+\s+${bad.last.status}`));
        const one = await sb.run(['cron', 'ls', '--name', 'good', '--json', '--store', store]);
        assert.deepEqual((JSON.parse(one.stdout) as Summary[]).map((s) => s.name), ['good']);
      });

      void it('per-slot replicas: a loser says "following" once per other replica, not every slot; each says one line when stopping', async (t) => {
        const store = storeFor(kind);
        if (kind === 'postgres') assert.equal((await sb.run(['migrate', '--store', store])).code, 0);
        const out = sb.path(`follow-${kind}.log`);
        const job = sb.script(`follow-${kind}.sh`, `echo "$LEASEHOLD_SLOT" >> ${out}`);
        const args = ['cron', '--name', 'follow', '--every', '1s', '--ttl', '3s', '--store', store, '--', job];
        const replicas = [sb.start(args), sb.start(args)];
        t.after(() => killLeft(...replicas));
        // Six slots: every slot one replica loses, so one loses several times.
        await until('six slots ran', () => existsSync(out) && sb.read(`follow-${kind}.log`).trim().split('\n').length >= 6, 20_000);
        await until('both replicas have scheduled the cron (a SIGTERM before its handler is installed kills a loading one)', () => replicas.every((r) => r.stderr.includes('scheduled:')), 60_000);
        for (const r of replicas) r.proc.kill('SIGTERM');
        const done = await Promise.all(replicas.map((r) => r.done));
        for (const d of done) assert.equal(d.code, 143, d.stderr);
        const following = done.map((d) => (d.stderr.match(/following: /g) ?? []).length);
        assert.ok(following.some((n) => n === 1), `a replica that lost slots said so: ${following.join(', ')}\n${done.map((d) => d.stderr).join('\n---\n')}`);
        for (const d of done) {
          assert.ok((d.stderr.match(/following: /g) ?? []).length <= 1, `"following" more than once per other replica:\n${d.stderr}`);
          assert.ok((d.stderr.match(/taking over: /g) ?? []).length <= 1, `"taking over" more than once after one "following":\n${d.stderr}`);
          // Taking over comes only after following.
          if (/taking over: /.test(d.stderr)) assert.ok(d.stderr.indexOf('following: ') < d.stderr.indexOf('taking over: '), d.stderr);
          assert.equal((d.stderr.match(/stopping on SIGTERM: /g) ?? []).length, 1, d.stderr);
        }
      });

      void it('--mode leader: the follower says whom it follows, then that it takes over when the leader stops', async (t) => {
        const store = storeFor(kind);
        if (kind === 'postgres') assert.equal((await sb.run(['migrate', '--store', store])).code, 0);
        const job = sb.script(`leader-${kind}.sh`, 'true');
        const args = ['cron', '--name', 'lead', '--mode', 'leader', '--every', '1s', '--ttl', '3s', '--store', store, '--', job];
        const first = sb.start(args);
        t.after(() => killLeft(first));
        await until('the first replica leads', () => /leader: token/.test(first.stderr), 15_000);
        const second = sb.start(args);
        t.after(() => killLeft(second));
        await until('the second follows', () => /following: /.test(second.stderr), 15_000);
        // Several slots pass while it follows: still one line.
        await until('three more slots ran on the leader', () => (first.stderr.match(/: succeeded/g) ?? []).length >= 4, 15_000);
        assert.equal((second.stderr.match(/following: /g) ?? []).length, 1, second.stderr);
        assert.match(second.stderr, /following: \S+ leads/);
        first.proc.kill('SIGTERM');
        const d1 = await first.done;
        assert.equal(d1.code, 143, d1.stderr);
        assert.match(d1.stderr, /stopping on SIGTERM: no job running; releasing the lease|stopping on SIGTERM: the job of slot/);
        // The leader released on its way out: the follower takes over well within a TTL (3s) plus its retry.
        await until('the follower takes over', () => /taking over from \S+: leader: token/.test(second.stderr), 10_000);
        second.proc.kill('SIGTERM');
        assert.equal((await second.done).code, 143);
      });

      void it('SIGTERM while a job runs: forwarded, and the slot is recorded interrupted (owed), not failed', async () => {
        const store = storeFor(kind);
        if (kind === 'postgres') assert.equal((await sb.run(['migrate', '--store', store])).code, 0);
        const job = sb.script(`long-${kind}.sh`, 'sleep 30');
        // The fault must land on a running term: on a loaded host the term can end first (CI2: the
        // replica's event loop stalled past its deadline and it stood down 'suspended', correctly),
        // and then the SIGTERM tests nothing. Such an attempt is made again, at most 3 times.
        for (let attempt = 1; ; attempt++) {
          const name = `long-${attempt}`;
          const cron = sb.start(['cron', '--name', name, '--every', '1s', '--ttl', '3s', '--store', store, '--', job]);
          await until('a slot started', () => /slot \S+: started/.test(cron.stderr), 15_000);
          cron.proc.kill('SIGTERM');
          const d = await cron.done;
          assert.equal(d.code, 143, d.stderr);
          const h = await sb.run(['cron', 'history', name, '--json', '--store', store]);
          const rows = JSON.parse(h.stdout) as { status: string; reason: string | null }[];
          assert.equal(rows.length, 1, h.stdout);
          assert.equal(rows[0]!.status, 'interrupted', h.stdout);
          if (attempt < 3 && /the term ended while the job ran/.test(rows[0]!.reason ?? '')) {
            process.stdout.write(`# attempt ${attempt}: the term ended before the SIGTERM (${rows[0]!.reason}); again\n`);
            continue;
          }
          assert.match(rows[0]!.reason ?? '', /SIGTERM while the job ran/);
          break;
        }
      });

      void it('a slow job does not overlap: slots that come due while it runs are recorded skipped (overlap)', async () => {
        const store = storeFor(kind);
        if (kind === 'postgres') assert.equal((await sb.run(['migrate', '--store', store])).code, 0);
        const out = sb.path(`slow-${kind}.log`);
        const job = sb.script(`slow-${kind}.sh`, `echo "start $LEASEHOLD_SLOT $(date +%s%N)" >> ${out}; sleep 2.2; echo "end $LEASEHOLD_SLOT $(date +%s%N)" >> ${out}`);
        const cron = sb.start(['cron', '--name', 'slow', '--every', '1s', '--ttl', '3s', '--store', store, '--', job]);
        // Two runs ended, counted from the job's own log rather than after a fixed 7 s: a loaded
        // host took 3 s to start the replica, and only one run fit (the next was interrupted by the
        // SIGTERM). The bound: the first slot within 10 s of the start, then two 2.2 s runs with
        // the skipped slots between them (the same multiple of the 1 s period as before), doubled.
        const ended = (): number => (existsSync(out) ? sb.read(`slow-${kind}.log`).split('\n').filter((l) => l.startsWith('end ')).length : 0);
        await until('two runs of the slow job ended', () => ended() >= 2, 2 * (10_000 + 2 * 3000));
        cron.proc.kill('SIGTERM');
        const d = await cron.done;
        assert.equal(d.code, 143, d.stderr);
        const lines = sb.read(`slow-${kind}.log`).trim().split('\n').map((l) => l.split(' '));
        // Never two at once: every start follows the previous end.
        let running = false;
        for (const [what] of lines) {
          assert.equal(what === 'start', !running, `overlap in ${JSON.stringify(lines)}`);
          running = what === 'start';
        }
        const h = await sb.run(['cron', 'history', 'slow', '--json', '--store', store]);
        const rows = JSON.parse(h.stdout) as { slot: string; status: string; reason: string | null }[];
        const overlap = rows.filter((r) => r.status === 'skipped' && /overlap/.test(r.reason ?? ''));
        assert.ok(overlap.length >= 2, JSON.stringify(rows));
        assert.ok(rows.filter((r) => r.status === 'succeeded').length >= 2, JSON.stringify(rows));
        assert.equal(new Set(rows.map((r) => r.slot)).size, rows.length);
      });
    });
  }
});

void describe('run --once-per: a signal during the claim', () => {
  void it('aborts a claim stuck behind a lock at once: exit 143, the command never runs, KEY is not claimed', async () => {
    const schema = freshSchema();
    schemas.push(schema);
    const store = pgUrl(schema);
    assert.equal((await sb.run(['migrate', '--store', store])).code, 0);
    const marker = sb.path('once-stuck.ran');
    const job = sb.script('once-stuck.sh', `touch ${marker}`);
    // Another session holds the slot table locked: the claim waits behind it for as long as it is held.
    const locker = new pg.Client({ connectionString: PG_URL });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${schema}".slots IN ACCESS EXCLUSIVE MODE`);
      const r = sb.start(['run', '--name', 'stuck', '--once-per', 'k1', '--ttl', '3s', '--store', store, '--', job]);
      await until('the lease acquired (the claim is next)', () => /acquired token/.test(r.stderr));
      // The claim is waiting on the lock (pg_locks shows a session not granted a lock on the table).
      await until('the claim waiting on the lock', async () => {
        const w = await locker.query(`SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'slots' AND NOT l.granted`);
        return w.rows.length > 0;
      });
      r.proc.kill('SIGTERM');
      // Exits while the lock is still held: it did not wait for the claim.
      const d = await r.done;
      assert.equal(d.code, 143, d.stderr);
      assert.match(d.stderr, /SIGTERM while claiming --once-per k1; not running the command/);
      await locker.query('ROLLBACK');
      assert.equal(existsSync(marker), false, 'the command ran');
      const h = await sb.run(['cron', 'history', 'stuck', '--json', '--store', store]);
      assert.deepEqual(JSON.parse(h.stdout), [], 'the aborted claim landed');
      // The lease was released: the next run of KEY runs at once.
      const next = await sb.run(['run', '--name', 'stuck', '--once-per', 'k1', '--store', store, '--', job]);
      assert.equal(next.code, 0, next.stderr);
      assert.equal(existsSync(marker), true);
    } finally {
      await locker.end();
    }
  });
});
