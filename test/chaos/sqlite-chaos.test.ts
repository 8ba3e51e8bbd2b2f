/**
 * The chaos harness's short profile on SQLite, and the negative control that must catch the
 * broken configuration (see chaos.test.ts for the other stores). A SQLite run restarts no server
 * (SQLite is a file; its faults are its own worker processes', and their clocks'), so this file
 * runs in the test runner's parallel phase. The file is named after its store: with SQLite left
 * out of LEASEHOLD_TEST_STORES the runner leaves it out, and chaos.test runs the control on
 * PostgreSQL instead.
 */
import { describe, it } from 'node:test';
import { negativeControl, shortProfile } from './short.js';

void describe('chaos on SQLite: the short profile proves the fence under every fault', () => {
  void it('on sqlite: real processes, every fault kind the store supports, zero invariant violations', { timeout: 240_000 }, async (t) => {
    await shortProfile('sqlite', t);
  });
  void it('negative control: with the fence switched off (--unfenced) the same harness reports violations', { timeout: 180_000 }, async (t) => {
    await negativeControl('sqlite', t);
  });
});
