/**
 * The backend registry (src/backends/index.ts): every descriptor is well formed, URLs find their
 * backend by scheme alone, and what no backend offers is one ConfigError that lists who does.
 * No store is opened here; each backend's own behaviour is the conformance suite's.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BACKENDS, backendForUrl, backendOfKind, embeddedDriver, openFleetPort, openSlotLedger, openStore } from '../../src/backends/index.js';
import { ConfigError } from '../../src/core/errors.js';
import { MemoryStore } from '../../src/testing/memory-store.js';

void describe('the backend registry', () => {
  void it('lists each backend once: kinds and schemes are unique, lower case, and each example URL finds its own backend', () => {
    const kinds = BACKENDS.map((b) => b.kind);
    assert.deepEqual([...new Set(kinds)], kinds, 'a kind is listed twice');
    const schemes = BACKENDS.flatMap((b) => b.schemes);
    assert.deepEqual([...new Set(schemes)], schemes, 'two backends claim one scheme');
    for (const b of BACKENDS) {
      assert.ok(b.schemes.length > 0, `${b.kind} opens no scheme`);
      for (const s of b.schemes) assert.match(s, /^[a-z][a-z0-9+.-]*$/, `${b.kind}: scheme ${s}`);
      assert.equal(backendForUrl(b.exampleUrl), b, `${b.exampleUrl} does not find ${b.kind}`);
      assert.equal(backendOfKind(b.kind), b);
      assert.equal(typeof b.openStore, 'function');
    }
    assert.equal(backendForUrl('POSTGRESQL://h/db')?.kind, 'postgres', 'schemes are case-insensitive');
    assert.equal(backendForUrl('MariaDB://h/db')?.kind, 'mysql', 'mariadb:// is the MySQL backend');
    assert.equal(backendForUrl('mssql://h/db'), undefined);
    assert.equal(backendForUrl('no-scheme'), undefined);
  });

  void it('has one embedded backend, whose driver answers without opening a file', () => {
    assert.equal(BACKENDS.filter((b) => b.embedded !== undefined).length, 1);
    const d = embeddedDriver().probe();
    assert.match(d.sqliteVersion, /^\d+\.\d+/);
    assert.equal(embeddedDriver().fileOf(new MemoryStore()), undefined, 'a store of another kind has no file');
  });

  void it('an unknown scheme names every registered backend by its example URL', async () => {
    await assert.rejects(openStore('mssql://root@127.0.0.1/app'), (e: unknown) => {
      assert.ok(e instanceof ConfigError);
      assert.match(e.message, /unknown scheme "mssql"/);
      for (const b of BACKENDS) assert.ok(e.message.includes(b.exampleUrl), `${b.exampleUrl} missing from: ${e.message}`);
      return true;
    });
  });

  void it('a store no backend owns gets one ConfigError for the fleet and for the slot ledger, naming the backends that have them', async () => {
    const store = new MemoryStore();
    await assert.rejects(openFleetPort(store), (e: unknown) => {
      assert.ok(e instanceof ConfigError);
      for (const b of BACKENDS.filter((x) => x.openFleet !== undefined)) assert.ok(e.message.includes(b.label), e.message);
      assert.match(e.message, /is a memory store/);
      return true;
    });
    await assert.rejects(openSlotLedger(store, 'memory:'), (e: unknown) => {
      assert.ok(e instanceof ConfigError);
      for (const b of BACKENDS.filter((x) => x.openSlotLedger !== undefined)) assert.ok(e.message.includes(b.label), e.message);
      return true;
    });
  });
});
