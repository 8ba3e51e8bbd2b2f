/**
 * Errors are thrown as their subclasses, so `instanceof` and the CLI's exit codes agree: a
 * misuse that was a bare `LeaseholdError('CONFIG')` (not a ConfigError, so exit 1, not 2) now is
 * one, and a call on a closed store is a ClosedError (code CLOSED, not retryable).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ClosedError, ConfigError } from '../../src/core/errors.js';
import { exitCodeFor } from '../../src/cli/common.js';
import { makeTestStore, selectedStores } from '../helpers/stores.js';

void describe('typed store errors', () => {
  for (const kind of selectedStores().filter((k) => k === 'postgres' || k === 'etcd')) {
    void it(`${kind}: a second watchFreed on one store is a ConfigError (exit 2)`, async () => {
      const t = await makeTestStore(kind);
      try {
        const stop = await t.store.watchFreed!(() => {});
        try {
          const err = await t.store.watchFreed!(() => {}).then(
            () => undefined,
            (e: unknown) => e,
          );
          assert.ok(err instanceof ConfigError, `got ${String(err)}`);
          assert.equal(exitCodeFor(err), 2);
        } finally {
          await stop();
        }
      } finally {
        await t.cleanup();
      }
    });
  }

  for (const kind of selectedStores()) {
    void it(`${kind}: every call on a closed store is a ClosedError`, async () => {
      const t = await makeTestStore(kind);
      const s = await t.open();
      await s.close();
      try {
        const calls: (() => Promise<unknown>)[] = [() => s.list(), () => s.history(), () => s.now(), () => s.revoke('x', 'test')];
        for (const call of calls) {
          const err = await Promise.resolve()
            .then(call)
            .then(
              () => undefined,
              (e: unknown) => e,
            );
          assert.ok(err instanceof ClosedError, `${kind}: got ${String(err)}`);
          assert.equal(err.code, 'CLOSED');
          assert.equal(err.retryable, false);
        }
      } finally {
        await t.cleanup();
      }
    });
  }
});
