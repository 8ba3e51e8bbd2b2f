/**
 * Terminal escape injection (issue 28 row 6): text the store holds (a revocation reason, a
 * holder, a slot's reason) reaches an operator's terminal through every human-readable output
 * as visible escapes, never as raw control characters; --json keeps the exact string. The
 * commands run as real processes against a SQLite file; the holder is written through the
 * store itself, as a library user's `holderLabel` (or a row from an older leasehold) would be.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { openSlotLedger, openStore } from '../../src/backends/index.js';
import type { LeaseStore } from '../../src/backends/store.js';
import { escapeControls, jsonSafe } from '../../src/cli/escape.js';
import { Sandbox, assertNoLeftovers, until, type Done } from './helpers.js';

/** ESC sequences that clear the screen, retitle the window and return to the line's start, and more. */
const REASON = 'ok\x1b[2J\x1b]0;title\x07\rspoof\x08\x0b\x7f\x9b31m\u202Eevil';
const HOLDER = 'lib\x1b[31m\x07\x9d:4242';
/** Every raw control a terminal acts on, save the newline that ends each line of output. */
const RAW = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/u;

function assertNoRawControls(text: string, what: string): void {
  const m = RAW.exec(text);
  assert.equal(m, null, `${what} printed a raw U+${m?.[0].codePointAt(0)?.toString(16).padStart(4, '0')}: ${JSON.stringify(text)}`);
}

const uniq = (p: string): string => `${p}-${randomBytes(4).toString('hex')}`;

void describe('stored text reaches the terminal escaped (sqlite)', () => {
  let sb: Sandbox;
  let url: string;
  let store: LeaseStore;
  const claim = async (name: string, holder: string): Promise<bigint> => {
    const [r] = await store.claim([{ name, holder, ttlMs: 60_000, expect: null, nextNonce: randomBytes(16).toString('base64url') }]);
    assert.equal(r?.outcome, 'acquired');
    return (r as { token: bigint }).token;
  };
  const ok = (r: Done, what: string): Done => {
    assert.equal(r.code, 0, `${what}: ${r.stderr}`);
    assertNoRawControls(r.stdout, `${what} (stdout)`);
    assertNoRawControls(r.stderr, `${what} (stderr)`);
    return r;
  };

  before(async () => {
    sb = new Sandbox('escape');
    url = `sqlite:${sb.path('leases.db')}`;
    store = await openStore(url);
    await store.migrate();
  });
  after(async () => {
    await store.close();
    sb.cleanup();
    assertNoLeftovers();
  });

  void it('escapeControls spells out C0, DEL, C1 and bidi controls, keeps the rest, and is idempotent', () => {
    const shown = escapeControls(REASON);
    assert.equal(shown, 'ok\\x1b[2J\\x1b]0;title\\x07\\rspoof\\x08\\x0b\\x7f\\x9b31m\\u{202E}evil');
    assert.equal(escapeControls(shown), shown);
    assert.equal(escapeControls('tab\there\nnext\x00'), 'tab\\there\\nnext\\x00');
    assert.equal(escapeControls('plain: é ✓ 漢字 C:\\path'), 'plain: é ✓ 漢字 C:\\path');
    const json = jsonSafe(JSON.stringify({ reason: REASON }));
    assert.equal(RAW.exec(json), null, json);
    assert.deepEqual(JSON.parse(json), { reason: REASON }, 'JSON with the rest escaped parses to the same value');
  });

  void it('a holder with controls: status, status --watch and run print it escaped; status --json keeps it exact', async () => {
    const name = uniq('held');
    await claim(name, HOLDER);
    const status = ok(await sb.run(['status', name, '--store', url]), 'status');
    assert.match(status.stdout, /lib\\x1b\[31m\\x07\\x9d:4242/);
    const json = JSON.parse(ok(await sb.run(['status', name, '--store', url, '--json']), 'status --json').stdout) as Array<{ holder: string }>;
    assert.equal(json[0]?.holder, HOLDER, '--json output is the stored string, unchanged');

    const watch = sb.start(['status', name, '--watch', '--store', url]);
    try {
      await until('status --watch prints the initial line', () => /initial/.test(watch.stdout));
    } finally {
      watch.proc.kill('SIGINT');
    }
    ok(await watch.done, 'status --watch');
    assert.match(watch.stdout, /holder lib\\x1b\[31m/);

    // Another runner reports who holds it: the holder another process wrote.
    const run = ok(await sb.run(['run', '--name', name, '--store', url, '--no-wait', '--busy-exit', '0', '--', 'true']), 'run --no-wait');
    assert.match(run.stderr, /lib\\x1b\[31m\\x07\\x9d:4242/, run.stderr);
  });

  void it('release --reason with ESC, OSC, BEL, CR, C1 and DEL: release and history print escapes; history --json keeps it exact', async () => {
    const name = uniq('revoked');
    await claim(name, HOLDER);
    const release = ok(await sb.run(['release', name, '--force', '--reason', REASON, '--store', url]), 'release');
    assert.match(release.stdout, /from lib\\x1b\[31m.*: ok\\x1b\[2J\\x1b\]0;title\\x07\\rspoof/);
    const history = ok(await sb.run(['history', name, '--store', url]), 'history');
    assert.ok(history.stdout.includes(escapeControls(REASON)), history.stdout);
    assert.equal(history.stdout.trimEnd().split('\n').length, 3, 'one line per entry under the header: a stored CR or LF starts no line');
    const entries = JSON.parse(ok(await sb.run(['history', name, '--store', url, '--json']), 'history --json').stdout) as Array<{ detail: string | null; previousHolder: string | null }>;
    const revoked = entries.find((e) => e.detail !== null);
    assert.equal(revoked?.detail, REASON, '--json output is the stored string, unchanged');
    assert.equal(revoked?.previousHolder, HOLDER);
  });

  void it('cron history prints a slot holder and reason escaped', async () => {
    const name = uniq('cron');
    const token = await claim(name, HOLDER);
    const ledger = await openSlotLedger(store, url);
    try {
      await ledger.skip({ name, holder: HOLDER, token, slots: [{ key: 'once:x', slotAtMs: null }], reason: REASON });
    } finally {
      await ledger.close();
    }
    const r = ok(await sb.run(['cron', 'history', name, '--store', url]), 'cron history');
    assert.ok(r.stdout.includes(escapeControls(REASON)), r.stdout);
    assert.ok(r.stdout.includes(escapeControls(HOLDER)), r.stdout);
  });
});
