/**
 * The dashboard's three views in a real browser (Debian's Chromium via playwright-core), against
 * real `leasehold cron` and `leasehold agent` processes and a `leasehold dashboard`, on SQLite and
 * on PostgreSQL (issue 31 item 1):
 *  - leases: job leases only; the agents' liveness leases `agent/*` are not in the table;
 *  - schedules: a per-slot cron's slots with outcome and who ran them; its replica is SIGKILLed
 *    mid-slot, nothing runs for a few periods, another replica takes over: the page shows the
 *    interrupted slot, the missed slots, and the new replica as the one that ran the latest;
 *  - fleet: two agents live, each owning a resource; one is SIGKILLed and shows stale and
 *    owner-dead; the other stops gracefully and shows deregistered; the resources table shows
 *    each resource's owner and generation, and both resources owner-dead (as does
 *    `leasehold fleet resources`);
 * and counts the dashboard's store reads by kind with 0, 1 and 10 watchers connected (one a Chromium
 * page, the rest the page's event stream read as its EventSource reads it).
 *
 * LEASEHOLD_DASHBOARD_SCREENSHOT=docs/dashboard-schedules.png saves the docs' screenshot (taken after the fleet test);
 * LEASEHOLD_DASHBOARD_WINDOW=60s measures reads over a minute per browser count (default 10s,
 * scaled to a minute in the printed figures; every bound below allows one read more than the
 * window holds, for its edges, so a short window asserts the same rates less tightly).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { tmpdir } from 'node:os';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { ROOT, Sandbox, threadStates, until, type Running } from '../cli/helpers.js';
import { parseDuration } from '../../src/core/config.js';
import type { BoardState } from '../../src/cli/dashboard.js';
import { makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';

declare const document: {
  querySelector(selector: string): { textContent: string | null; getAttribute(n: string): string | null } | null;
  querySelectorAll(selector: string): { length: number };
};

const candidates = process.env['LEASEHOLD_TEST_CHROMIUM'] !== undefined ? [process.env['LEASEHOLD_TEST_CHROMIUM']] : ['/usr/bin/chromium', '/usr/bin/chromium-browser'];
const CHROMIUM = candidates.find((p) => p !== '' && existsSync(p));
const skip = CHROMIUM === undefined ? 'Chromium is not installed (node scripts/services/chromium.mjs install, or apt-get install chromium)' : false;
if (skip !== false) process.stdout.write(`# skipping the dashboard views test: ${skip}\n`);

/** The cron period: long enough for a 1s job on a loaded machine, short enough to miss several slots in a test. */
const PERIOD_MS = 2000;
/**
 * The cron replicas' TTL. What this file shows is the dashboard's account of a takeover, not how
 * fast one happens, so a replica must keep its term through the stalls a loaded CI host gives it:
 * ci72 saw the first replica's event loop held about 5 s (its own log: "local deadline passed
 * 3729ms ago ... suspension suspected") against a 2 s TTL, and it lost its term before finishing
 * a slot. 8 s outlasts such a stall with a renewal to spare (one every TTL/3).
 */
const CRON_TTL_MS = 8000;
/** How long the first replica was waited for before ci1 (five periods and 5 s); now the point at which its quiet is reported. */
const QUIET_MS = 5 * PERIOD_MS + 5000;
/**
 * The liveness TTL (--stale-after) of the agent that is SIGKILLed: it shows stale this long after
 * its last heartbeat. Its liveness until the kill is the test's precondition (placement needs it),
 * so it gets 20 heartbeats of slack: under stress-ng --cpu 2 an agent with 2s (4 heartbeats) went
 * stale before the placement, and CI at load 7 saw one with 6 heartbeats lapse (test/fleet/registry).
 * The cost is waiting this long once, after the kill.
 */
const STALE_MS = 10_000;
/** Agents that must stay live (or stop gracefully) get 60 heartbeats: their liveness is never what is tested. */
const SURVIVOR_STALE_MS = 30_000;
const WINDOW_MS = parseDuration(process.env['LEASEHOLD_DASHBOARD_WINDOW'] ?? '10s', 'LEASEHOLD_DASHBOARD_WINDOW');

const errorText = (e: unknown): string => (e instanceof Error ? `${e.message}` : String(e));

/**
 * Reads the dashboard's event stream as a browser's EventSource does, in the background until
 * `signal` aborts (a watcher that stopped reading would be a slow client, not a browser), and
 * settles once a `state` event holding the schedule `name` arrived: within 30 s, the same bound as
 * the page's.
 */
async function watchUntilSchedule(url: string, name: string, signal: AbortSignal, who: string): Promise<void> {
  const res = await fetch(url, { signal, headers: { accept: 'text/event-stream' } });
  assert.equal(res.status, 200, `${who}: GET ${url}`);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/, `${who}: an event stream`);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let seen = 0;
  const shown = new Promise<void>((resolveShown, rejectShown) => {
    let buffer = '';
    void (async () => {
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return rejectShown(new Error(`${who}: the server ended the stream after ${seen} state events`));
          buffer += decoder.decode(value, { stream: true });
          for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
            const lines = buffer.slice(0, end).split('\n');
            buffer = buffer.slice(end + 2);
            if (!lines.includes('event: state')) continue;
            seen++;
            const state = JSON.parse(lines.filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n')) as BoardState;
            if (state.schedules.some((x) => x.name === name)) resolveShown();
          }
        }
      } catch (e) {
        if (!signal.aborted) rejectShown(e instanceof Error ? e : new Error(String(e)));
      }
    })();
  });
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${who}: no state with the schedule ${name} in 30 s (${seen} state events read)`)), 30_000)));
  try {
    await Promise.race([shown, late]);
  } finally {
    clearTimeout(timer);
  }
}

function events(r: Running): Array<Record<string, unknown>> {
  return r.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}
const eventOf = (r: Running, name: string): Record<string, unknown> | undefined => events(r).find((e) => e['event'] === name);
const stdoutEvent = (r: Running, name: string): boolean => r.stdout.split('\n').some((l) => l.includes(`"event":"${name}"`));

async function stop(r: Running): Promise<void> {
  if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGTERM');
  await r.done;
}

// The dashboard reads every store through the same ports (list, the ledger's records, the
// fleet's agents), which the conformance suites check per store; what this file proves is the
// page and its read bounds, so npm test runs it on SQLite alone (about 100 s a store).
// LEASEHOLD_DASHBOARD_STORES=sqlite,postgres runs it on more.
const KINDS = ((process.env['LEASEHOLD_DASHBOARD_STORES'] ?? 'sqlite').split(',') as StoreKind[]).filter((k) => selectedStores().includes(k));
if (!KINDS.includes('postgres') && selectedStores().includes('postgres')) {
  process.stdout.write('# dashboard views: PostgreSQL left out (LEASEHOLD_DASHBOARD_STORES=sqlite,postgres runs it): same ports as SQLite, checked per store by the conformance suites\n');
}

for (const kind of KINDS) views(kind);

function views(kind: StoreKind): void {
  void describe(`dashboard views in Chromium (${kind}, loopback)`, { skip }, () => {
    let sb: Sandbox;
    let ts: TestStore | undefined;
    let store: string;
    let dash: Running;
    let url: string;
    let browser: Browser;
    const procs: Running[] = [];
    /** The cron replica left running by the schedules test, for the read counts. */
    let liveCron: Running | undefined;
    const startCli = (args: string[]): Running => {
      const r = sb.start(args);
      procs.push(r);
      return r;
    };
    const cron = (): Running => startCli(['cron', '--name', 'billing', '--every', `${PERIOD_MS}ms`, '--ttl', `${CRON_TTL_MS}ms`, '--json', '--store', store, '--', 'sleep', '1']);
    const agent = (id: string, labels: string, staleMs = SURVIVOR_STALE_MS): Running =>
      startCli(['agent', '--id', id, '--labels', labels, '--heartbeat', '500ms', '--stale-after', `${staleMs}ms`, '--json', '--store', store]);
    const boardState = async (): Promise<BoardState> => (await (await fetch(`${url}state.json`)).json()) as BoardState;

    before(async () => {
      sb = new Sandbox('dashboard-views');
      // A fresh file or schema, migrated; everything below reaches it through its URL as a user would.
      ts = await makeTestStore(kind);
      store = ts.url;
      dash = sb.start(['dashboard', '--store', store, '--port', '0']);
      // A hang detector, not a measure: a Node process's start-up is not what this file tests, and
      // CI (ci73, every file about 1.5x slower than usual) saw this one take over 10 s. 60 s, as
      // the other start-up waits of the suite (test/scheduler/clock-ahead allows 120 s).
      await until('the dashboard prints its URL', () => /dashboard at http:\/\/127\.0\.0\.1:\d+\//.test(dash.stdout), 60_000).catch((e: unknown) => {
        throw new Error(`${errorText(e)}; the dashboard said:\n${dash.stdout.slice(-2000)}${dash.stderr.slice(-2000)}`, { cause: e });
      });
      url = /(http:\/\/127\.0\.0\.1:\d+\/)/.exec(dash.stdout)![1]!;
      const { chromium } = await import('playwright-core');
      browser = await chromium.launch({ executablePath: CHROMIUM!, headless: true, args: ['--no-sandbox'] });
    });

    after(async () => {
      await browser?.close();
      for (const r of procs) await stop(r);
      if (dash !== undefined) {
        dash.proc.kill('SIGINT');
        await dash.done;
      }
      sb?.cleanup();
      await ts?.cleanup();
    });

    void it('schedules: a killed replica’s slot shows interrupted, the slots nobody ran show missed, the new replica ran the latest', async (t) => {
      const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
      // Closed however the test ends: a page left open counts as a connected browser, and the
      // read counts below then wait for none (CI: "no browser connected" after this test failed).
      t.after(() => page.close().catch(() => undefined));
      await page.goto(url);
      const first = cron();
      // The first replica runs a whole slot, and the page shows it with who ran it. How soon is not
      // what this file shows. A replica on SQLite went quiet here for over 13 s in two of this
      // stop's rehearsals (ci1: after "slot-started"; ci3: after "scheduled"), under CI's load and
      // not alone, which is not understood: a replica quiet past the old bound (QUIET_MS) is
      // reported with what its threads were doing, twice a second apart, and waited for up to a
      // minute, a hang detector.
      const startedAt = performance.now();
      const looks = [QUIET_MS, QUIET_MS + 1000, 3 * QUIET_MS];
      await until(
        'the first replica finishes a slot',
        () => {
          if (looks.length > 0 && performance.now() - startedAt >= looks[0]!) {
            t.diagnostic(`the first replica has said nothing new for ${Math.round(performance.now() - startedAt)} ms since its start; its threads: ${threadStates(first.proc.pid!)}`);
            looks.shift();
          }
          return eventOf(first, 'slot-succeeded') !== undefined;
        },
        60_000,
      ).catch((e: unknown) => {
        throw new Error(`${errorText(e)}; the replica said:\n${first.stdout.slice(-2000)}${first.stderr.slice(-4000)}`, { cause: e });
      });
      t.diagnostic(`the first replica finished its first slot ${Math.round(performance.now() - startedAt)} ms after its start`);
      const a = String(eventOf(first, 'slot-succeeded')!['holder']);
      await page.waitForFunction((h) => {
        const row = document.querySelector('[data-schedule="billing"] tr[data-status="succeeded"] td:nth-child(4)');
        return row?.textContent === h;
      }, a, { timeout: 15_000 });
      assert.equal(await page.$$eval('#leases tr[data-lease="billing"]', (r) => r.length), 1, 'the schedule is a job lease in the leases view too');

      // SIGKILL it mid-slot (its reaper kills the job): the slot stays 'claimed' under a term that
      // ends when its lease expires; nobody runs the slots meanwhile.
      const startedBefore = events(first).filter((e) => e['event'] === 'slot-started').length;
      await until('the first replica starts another slot', () => events(first).filter((e) => e['event'] === 'slot-started').length > startedBefore, 3 * PERIOD_MS + 5000);
      const killedSlot = String(events(first).filter((e) => e['event'] === 'slot-started').at(-1)!['slot']);
      first.proc.kill('SIGKILL');
      await first.done;
      // Three periods without a replica: at least two slots come due that nobody runs.
      await new Promise((r) => setTimeout(r, 3 * PERIOD_MS));
      const second = cron();
      liveCron = second;
      // The killed term holds the lease until it expires (a TTL after its last renewal, at most),
      // then the second replica reruns the killed slot: a TTL more than the first replica's bound.
      await until('the second replica finishes a slot', () => eventOf(second, 'slot-succeeded') !== undefined, CRON_TTL_MS + 5 * PERIOD_MS + 5000).catch((e: unknown) => {
        throw new Error(`${errorText(e)}; the replica said:\n${second.stdout.slice(-2000)}${second.stderr.slice(-4000)}`, { cause: e });
      });
      const b = String(eventOf(second, 'slot-succeeded')!['holder']);
      assert.notEqual(a, b);
      t.diagnostic(`killed mid-slot ${killedSlot}; second replica's events: ${events(second).map((e) => `${String(e['event'])}${e['slot'] === undefined ? '' : ` ${String(e['slot'])}`}`).join(', ')}`);

      // The page: the killed slot marked (interrupted, or rerun with its reason), missed slots marked, the newest slot run by the second replica.
      await page.waitForFunction(
        ([slot, h]) => {
          const killed = document.querySelector(`[data-schedule="billing"] tr[data-slot="${slot}"]`);
          const newest = document.querySelector('[data-schedule="billing"] tr[data-status="succeeded"] td:nth-child(4)');
          return killed !== null && /interrupted|rerun/.test(killed.textContent ?? '') && newest?.textContent === h && document.querySelectorAll('[data-schedule="billing"] tr[data-missed="true"]').length >= 1;
        },
        [killedSlot, b] as const,
        { timeout: 20_000 },
      );
      const killedText = await page.$eval(`[data-schedule="billing"] tr[data-slot="${killedSlot}"]`, (e) => e.textContent ?? '');
      // --on-interrupted rerun (the default): the next term reruns the killed slot and says why.
      assert.match(killedText, /rerun: term \d+ was interrupted/, killedText);
      const missed = await page.$$eval('[data-schedule="billing"] tr[data-missed="true"]', (rows) => rows.map((r) => r.textContent ?? ''));
      // Every reason the scheduler gives a missed slot is true here, and which one a slot gets is
      // a race the test does not control (src/scheduler/cron.ts): a replica whose first claim is
      // its start-up catch-up says the slots were missed while no replica led; one whose timer
      // fired for a due slot first says no replica could claim them (a dead replica's lease
      // running out); and the first replica, starved on a loaded host before its kill, says it
      // was late for them itself (CI saw the second and the third).
      const reasons = /missed while no replica led|missed: no replica could claim it \(a term ran past it: a job that overran, or a dead replica's lease running out\)|missed: this replica was late \(paused or slow\) and no other claimed it/;
      assert.ok(missed.every((m) => reasons.test(m)), missed.join('\n'));
      t.diagnostic(`page: killed slot row "${killedText}"; ${missed.length} missed slot(s) marked`);
      const s = (await boardState()).schedules.find((x) => x.name === 'billing')!;
      assert.equal(s.periodMs, PERIOD_MS, 'the period found from the slot times');
      // What the schedule is, from the record its replicas wrote, and the next due slot from it: not an estimate.
      assert.equal(s.schedule?.description, `every ${PERIOD_MS / 1000}s`);
      assert.equal(s.schedule?.mode, 'per-slot');
      assert.ok(s.nextDueMs !== null && s.nextDueMs % PERIOD_MS === 0, `next due ${String(s.nextDueMs)}`);
      const meta = await page.$eval('[data-schedule="billing"] .meta', (e) => e.textContent ?? '');
      assert.match(meta, new RegExp(`every ${PERIOD_MS / 1000}s · per-slot · catch-up latest within .* · next due \\d{4}-\\d\\d-\\d\\d`), meta);
      assert.doesNotMatch(meta, /estimated/, meta);
      assert.ok(s.slots.some((x) => x.holder === a) && s.slots.some((x) => x.holder === b), 'both replicas appear as the ones that ran slots');
      await page.close();
    });

    void it('fleet: agents with state and labels; a killed owner shows stale and owner-dead, a stopped one deregistered; agent leases are not job leases', async (t) => {
      const a1 = agent('a1', 'zone=eu-1', STALE_MS);
      const a2 = agent('a2', 'zone=us-1');
      const startedAt = performance.now();
      // A hang detector, not a measure: two Node processes starting next to Chromium took 0.7-6.3 s
      // under stress-ng --cpu 2, and once more than 10 s.
      await until('both agents are live', () => stdoutEvent(a1, 'live') && stdoutEvent(a2, 'live'), 30_000).catch((e: unknown) => {
        throw new Error(`${errorText(e)}; a1: ${a1.stdout}${a1.stderr}; a2: ${a2.stdout}${a2.stderr}`, { cause: e });
      });
      t.diagnostic(`both agents live ${Math.round(performance.now() - startedAt)}ms after their start`);
      const placed = await sb.run(['fleet', 'place', 'tenant-7', '--labels', 'zone=eu-1', '--json', '--store', store]);
      assert.equal(placed.code, 0, `${placed.stderr}; a1: ${a1.stdout}${a1.stderr}`);
      assert.match(placed.stdout, /"agent":\s*"a1"/, placed.stdout);
      const placed2 = await sb.run(['fleet', 'place', 'tenant-9', '--labels', 'zone=us-1', '--json', '--store', store]);
      assert.equal(placed2.code, 0, placed2.stderr);
      const generation = String((JSON.parse(placed.stdout) as { generation: string }).generation);

      const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
      t.after(() => page.close().catch(() => undefined));
      await page.goto(`${url}#view-fleet`);
      const agentState = (id: string): Promise<string | null> => page.$eval(`tr[data-agent="${id}"] [data-state]`, (e) => e.getAttribute('data-state')).catch(() => null);
      await page.waitForFunction(() => document.querySelector('tr[data-agent="a1"] td.owned')?.textContent === '1', undefined, { timeout: 10_000 });
      assert.equal(await agentState('a1'), 'live');
      assert.equal(await agentState('a2'), 'live');
      assert.match(await page.$eval('tr[data-agent="a1"]', (e) => e.textContent ?? ''), /zone=eu-1/);
      assert.equal(await page.$$eval('#leases tr[data-lease^="agent/"]', (r) => r.length), 0, 'agents’ liveness leases stay out of the leases view');
      const ownerState = (resource: string): Promise<string | null> =>
        page.$eval(`tr[data-resource="${resource}"] [data-owner-state]`, (e) => e.getAttribute('data-owner-state')).catch(() => null);
      await page.waitForFunction(() => document.querySelector('tr[data-resource="tenant-9"] td.owner')?.textContent === 'a2', undefined, { timeout: 10_000 });
      assert.equal(await page.$eval('tr[data-resource="tenant-7"] td.owner', (e) => e.textContent), 'a1');
      assert.equal(await page.$eval('tr[data-resource="tenant-7"] td.generation', (e) => e.textContent), generation);
      assert.deepEqual([await ownerState('tenant-7'), await ownerState('tenant-9')], ['live', 'live']);
      assert.equal(await page.$eval('tr[data-resource="tenant-7"]', (e) => e.getAttribute('class')), null, 'a live owner is not highlighted');

      a1.proc.kill('SIGKILL');
      await a1.done;
      const killedAt = Date.now();
      a2.proc.kill('SIGTERM');
      await a2.done;
      // Stale once its lease expires by the store's clock (STALE_MS after the last heartbeat), seen at the next fleet reading (2s).
      await page.waitForFunction(
        () =>
          document.querySelector('tr[data-agent="a1"] [data-state]')?.getAttribute('data-state') === 'stale' &&
          document.querySelector('tr[data-agent="a2"] [data-state]')?.getAttribute('data-state') === 'deregistered',
        undefined,
        { timeout: 4 * STALE_MS + 10_000 },
      );
      t.diagnostic(`a1 shown stale ${Date.now() - killedAt}ms after its SIGKILL (lease TTL ${STALE_MS}ms, fleet read every 2s; measured, not asserted)`);
      assert.equal(await page.$eval('tr[data-agent="a1"]', (e) => e.getAttribute('class')), 'ownerdead');
      assert.match(await page.$eval('tr[data-agent="a1"]', (e) => e.textContent ?? ''), /owner dead: 1 resource/);
      assert.equal(await page.$eval('tr[data-agent="a2"]', (e) => e.getAttribute('class')), 'ownerdead', 'a deregistered agent that still owns a resource');
      // The resources: each owner-dead, with the owner's state, in the same reading as the agents'.
      await page.waitForFunction(
        () =>
          document.querySelector('tr[data-resource="tenant-7"] [data-owner-state]')?.getAttribute('data-owner-state') === 'stale' &&
          document.querySelector('tr[data-resource="tenant-9"] [data-owner-state]')?.getAttribute('data-owner-state') === 'deregistered',
        undefined,
        { timeout: 10_000 },
      );
      for (const r of ['tenant-7', 'tenant-9']) {
        assert.equal(await page.$eval(`tr[data-resource="${r}"]`, (e) => e.getAttribute('class')), 'ownerdead', `${r} is highlighted`);
        assert.match(await page.$eval(`tr[data-resource="${r}"]`, (e) => e.textContent ?? ''), /owner dead/);
      }
      // The CLI's listing says the same, by the store's clock.
      const listed = await sb.run(['fleet', 'resources', '--json', '--store', store]);
      assert.equal(listed.code, 0, listed.stderr);
      const rows = (JSON.parse(listed.stdout) as { resources: Array<{ resource: string; agent: string; generation: string; ownerState: string }>; next: string | null }).resources;
      assert.deepEqual(
        rows.map((r) => [r.resource, r.agent, r.ownerState]),
        [
          ['tenant-7', 'a1', 'stale'],
          ['tenant-9', 'a2', 'deregistered'],
        ],
      );
      assert.equal(rows[0]!.generation, generation);
      const text = await sb.run(['fleet', 'resources', '--limit', '1', '--store', store]);
      assert.equal(text.code, 0, text.stderr);
      assert.match(text.stdout, /tenant-7\s+a1\s+\d+\s+owner dead \(stale\)/, text.stdout);
      assert.match(text.stdout, /more after tenant-7: --after "tenant-7"/, text.stdout);

      // The docs' screenshot: the schedule still shows the takeover's rerun and missed slots among its last slots.
      await page.setViewportSize({ width: 1200, height: 700 });
      const wanted = process.env['LEASEHOLD_DASHBOARD_SCREENSHOT'];
      const shot = resolve(ROOT, wanted !== undefined && kind === 'sqlite' ? wanted : join(tmpdir(), `leasehold-dashboard-views-${kind}-${process.pid}.png`));
      mkdirSync(dirname(shot), { recursive: true });
      await page.screenshot({ path: shot, fullPage: true });
      t.diagnostic(`screenshot: ${shot}`);
      await page.close();
    });

    void it('store reads with 0, 1 and 10 watchers (one a Chromium page): the fleet only while watched, everything else independent of the number of watchers', async (t) => {
      // A live schedule and a live agent, so every kind of read has something to do.
      if (liveCron === undefined || liveCron.proc.exitCode !== null) liveCron = cron();
      const live = agent('a3', 'zone=eu-1');
      await until('the agent is live', () => stdoutEvent(live, 'live'));
      const measure = async (n: number): Promise<{ n: number; list: number; history: number; ledger: number; records: number; fleet: number; resources: number; total: number }> => {
        const contexts: BrowserContext[] = [];
        const streams: AbortController[] = [];
        const shownAfter: number[] = [];
        if (n > 0) {
          // One Chromium page, and n - 1 more watchers as the dashboard's own event stream read
          // from here. To the server a browser is its EventSource: one GET of /events, held open
          // and written to, and its store reads are what this test counts. Ten Chromium renderers
          // are not: CI (stop 49, five test files at once on two cores) saw the sixth page not
          // render within 30 s although the server had sent it the schedule, so the test failed
          // on how fast Chromium renders, which it does not claim. Every watcher still has to
          // receive the schedule, and the page has to render it.
          const context = await browser.newContext();
          contexts.push(context);
          const page: Page = await context.newPage();
          const errors: string[] = [];
          page.on('pageerror', (e) => errors.push(errorText(e)));
          const opened = performance.now();
          await page.goto(url);
          // A predicate polled in the page, not waitForSelector: the schedules section is rebuilt
          // whenever a slot changes, and an element the protocol resolved can be replaced before
          // its next round trip returns it on a loaded host. One evaluation in the page answers
          // atomically whether it got the schedule.
          await page.waitForFunction(() => document.querySelector('[data-schedule="billing"]') !== null, undefined, { polling: 250, timeout: 30_000 }).catch(async (e: unknown) => {
            // What the page shows instead: its connection, the schedules section and the server's counts.
            const shown = await page
              .evaluate(() => ['connText', 'schedList', 'schedErr', 'stats'].map((id) => `${id}: ${(document.querySelector('#' + id)?.textContent ?? '(none)').slice(0, 300)}`).join(' | '))
              .catch((x: unknown) => `(page unreadable: ${errorText(x)})`);
            throw new Error(`the browser: the schedule did not show; page errors: ${errors.join(' | ') || 'none'}; it shows ${shown}`, { cause: e });
          });
          shownAfter.push(Math.round(performance.now() - opened));
          assert.deepEqual(errors, [], 'the browser: no script errors');
          for (let i = 1; i < n; i++) {
            const stream = new AbortController();
            streams.push(stream);
            const opened = performance.now();
            await watchUntilSchedule(`${url}events`, 'billing', stream.signal, `watcher ${i + 1} of ${n}`);
            shownAfter.push(Math.round(performance.now() - opened));
          }
          t.diagnostic(`${n} watcher(s): each had the schedule after ${shownAfter.join(', ')}ms (the first a Chromium page)`);
          await until(`the server counts ${n} watchers`, async () => (await boardState()).clients === n, 30_000);
        } else {
          await until('no browser connected', async () => (await boardState()).clients === 0);
          // A fleet reading already in flight when the last browser left may still land.
          await new Promise((r) => setTimeout(r, 2500));
        }
        const before = (await boardState()).reads;
        await new Promise((r) => setTimeout(r, WINDOW_MS));
        const after = (await boardState()).reads;
        for (const s of streams) s.abort();
        await Promise.all(contexts.map((c) => c.close()));
        const perMin = (k: keyof typeof before): number => Math.round(((after[k] - before[k]) * 60_000) / WINDOW_MS);
        return { n, list: perMin('list'), history: perMin('history'), ledger: perMin('ledger'), records: perMin('records'), fleet: perMin('fleet'), resources: perMin('resources'), total: perMin('total') };
      };
      const figures = [];
      for (const n of [0, 1, 10]) figures.push(await measure(n));
      for (const f of figures) {
        t.diagnostic(`${f.n} watchers: ${f.total} store reads/min (lease lists ${f.list}, histories ${f.history}, slot ledgers ${f.ledger}, schedule records ${f.records}, fleet ${f.fleet}, resource pages ${f.resources}) over ${WINDOW_MS / 1000}s, scaled to a minute`);
      }
      const [none, one, ten] = figures as [(typeof figures)[0], (typeof figures)[0], (typeof figures)[0]];
      assert.equal(none.fleet, 0, 'nobody watching: the fleet is not read');
      // At most one fleet reading per 2s (FLEET_EVERY_MS), plus one for the window's edges.
      const fleetBound = Math.round(((WINDOW_MS / 2000 + 1) * 60_000) / WINDOW_MS);
      assert.ok(one.fleet > 0 && one.fleet <= fleetBound, `1 watcher: fleet ${one.fleet}/min <= ${fleetBound}`);
      assert.ok(ten.fleet <= fleetBound, `10 watchers: fleet ${ten.fleet}/min <= ${fleetBound}, the same bound as one`);
      // Nobody places or moves anything here: the resources page every 30 s at most (RESOURCES_EVERY_MS), plus one for the window's edges, only while watched.
      assert.equal(none.resources, 0, 'nobody watching: no resource pages');
      const resourcesBound = Math.round(((WINDOW_MS / 30_000 + 1) * 60_000) / WINDOW_MS);
      for (const f of [one, ten]) assert.ok(f.resources <= resourcesBound, `${f.n} watchers: resource pages ${f.resources}/min <= ${resourcesBound}`);
      // One schedule: its ledger at most once a second, whatever the watchers.
      const ledgerBound = Math.round(((WINDOW_MS / 1000 + 1) * 60_000) / WINDOW_MS);
      for (const f of figures) assert.ok(f.ledger <= ledgerBound, `${f.n} watchers: ledger ${f.ledger}/min <= ${ledgerBound}`);
      // The schedule records: every 30 s once every schedule has one, plus one for the window's edges.
      const recordsBound = Math.round(((WINDOW_MS / 30_000 + 1) * 60_000) / WINDOW_MS);
      for (const f of figures) assert.ok(f.records <= recordsBound, `${f.n} watchers: schedule records ${f.records}/min <= ${recordsBound}`);
    });
  });
}
