/**
 * `leasehold cron` arms its stop signals before its schedule starts and installs the handler that
 * drains it after its probe servers start: a signal in between must reach that handler, not kill
 * the process (process.emit calls the listeners without delivering a real signal).
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { StopSignals } from '../../src/cli/stop-signals.js';

const counts = (): number[] => ['SIGTERM', 'SIGINT', 'SIGHUP'].map((s) => process.listenerCount(s));

void describe('StopSignals', () => {
  const before = counts();
  let s: StopSignals | undefined;
  afterEach(() => {
    s?.disarm();
    assert.deepEqual(counts(), before, 'a listener was left on process');
  });

  void it('keeps a signal that arrives before the handler and hands it over when the handler is set', () => {
    s = new StopSignals().arm();
    assert.deepEqual(counts(), before.map((n) => n + 1), 'armed: one listener per stop signal, so the default action (death) no longer runs');
    process.emit('SIGTERM', 'SIGTERM');
    process.emit('SIGINT', 'SIGINT');
    assert.equal(s.received, 'SIGTERM', 'the first signal is the one kept');
    const seen: string[] = [];
    s.handle((sig) => seen.push(sig));
    assert.deepEqual(seen, ['SIGTERM'], 'the kept signal reaches the handler once it is set');
    process.emit('SIGHUP', 'SIGHUP');
    assert.deepEqual(seen, ['SIGTERM', 'SIGHUP'], 'later signals go straight to the handler');
  });

  void it('with no signal before the handler, the handler sees only what comes after it', () => {
    s = new StopSignals().arm();
    const seen: string[] = [];
    s.handle((sig) => seen.push(sig));
    assert.deepEqual(seen, []);
    assert.equal(s.received, undefined);
    process.emit('SIGTERM', 'SIGTERM');
    assert.deepEqual(seen, ['SIGTERM']);
    assert.equal(s.received, 'SIGTERM');
  });

  void it('disarm removes its listeners and is safe twice; arm twice adds them once', () => {
    s = new StopSignals().arm().arm();
    assert.deepEqual(counts(), before.map((n) => n + 1));
    s.disarm();
    s.disarm();
    assert.deepEqual(counts(), before);
  });
});
