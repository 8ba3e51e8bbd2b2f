/**
 * The chaos harness with liveness 'session' (issue 32, docs/liveness.md): the nemesis SIGKILLs
 * leaders and ends a live leader's session on the server (pg_terminate_backend, KILL
 * CONNECTION); the invariants are the same as in ttl mode (no stale write accepted), and the
 * report measures the takeovers and the belief overlap after a session was ended. A short run
 * per store (a few seconds of faults); `npm run chaos -- --liveness session` runs the full
 * profile. Nothing here restarts a server (restart is not selected), so this file runs in the
 * parallel phase.
 *
 * Two workers: with more, a freed term is often won by a contender other than the one the
 * server handed the session lock to, and that term is not tied to a session (it ends at its
 * TTL) for as long as its holder leads: a known gap (docs/chaos.md, "What it found"). It
 * happens with two as well (a holder whose session was ended re-contends at once, and can win
 * the orphaned term without the lock), and then session-end has no target: the run gives it up
 * after its retries, and the test accepts that only when an untied term is on record.
 *
 * TTL 9 s: a SIGKILLed leader in ttl mode keeps its term at least TTL - renew interval (TTL/3)
 * after its death, 6 s, so a takeover before that can only be the store ending the term on the
 * session's end. The bound is that, not less, and the TTL is chosen so that it stays far above the
 * start of the one follower, which may be a replacement still starting: a Node process takes
 * 0.5-1 s to start on a loaded host, and with stress-ng --cpu 2 beside the suite a takeover by a
 * starting replacement took 3.6 s (the 4.5 s TTL's bound was 3 s).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { selectedStores } from '../helpers/stores.js';
import { shortProfile } from './short.js';

const TTL_MS = 9000;
/** What a ttl-mode term has left, at least, when its holder dies: TTL less one renew interval. */
const TTL_MODE_LEFT_MS = TTL_MS - TTL_MS / 3;
const stores = selectedStores().filter((k) => k === 'postgres' || k === 'mysql' || k === 'sqlite');

void describe("chaos with liveness 'session': SIGKILLs and ended sessions, no stale write accepted", () => {
  for (const kind of stores) {
    const faults = kind === 'sqlite' ? 'kill' : 'kill,session-end';
    void it(`on ${kind}: ${faults}; every invariant holds and a killed leader's tied term ends before a ttl term could`, { timeout: 240_000 }, async (t) => {
      const report = await shortProfile(kind, t, { duration: '8s', args: ['--liveness', 'session', '--ttl', `${TTL_MS}ms`, '--faults', faults, '--workers', '2'], mayMiss: ['session-end'] });
      if (report === null) return; // skipped, said why
      const r = report.result;
      t.diagnostic(`${kind}: ${r.counts.sessionTied} of ${r.counts.terms} terms tied to a session`);
      for (const x of r.takeovers) {
        t.diagnostic(
          `${kind}: #${x.n} ${x.kind} of ${x.worker} (${x.tied ? 'tied' : 'untied'}): stood down ${x.stoodDownMs}ms, next leader ${x.tookOverMs}ms, overlap ${x.overlapMs}ms`,
        );
      }
      assert.ok(r.counts.sessionTied > 0, 'no term was tied to a session: the run did not test the mode');
      const tiedKills = r.takeovers.filter((x) => x.kind === 'kill' && x.tied && x.tookOverMs !== null);
      for (const x of tiedKills) {
        assert.ok(x.tookOverMs! < TTL_MODE_LEFT_MS, `#${x.n}: a tied term of a SIGKILLed leader ended after ${x.tookOverMs}ms, as if by its TTL (${TTL_MS}ms)`);
      }
      if (kind !== 'sqlite') {
        const ended = r.takeovers.filter((x) => x.kind === 'session-end');
        // The known gap (header): no session-end only when the leaders' terms were untied.
        if (ended.length === 0) {
          assert.ok(r.counts.sessionTied < r.counts.terms, 'no session was ended, though every term was tied to one');
          t.diagnostic(`${kind}: no session-end injected: the leaders' terms were not tied to their sessions (the known gap)`);
        }
        // The holder must see its session's close and stand down, well before its term could expire.
        for (const x of ended) assert.ok(x.stoodDownMs !== null && x.stoodDownMs < TTL_MS / 2, `#${x.n}: stood down after ${x.stoodDownMs}ms`);
      }
    });
  }
});
