/**
 * What the docs say each store needs before `run` (docs/stores.md, "Setup", and the README's
 * store table), checked against what `run` does: on a
 * fresh prefix Redis runs at once, etcd exits 3 until `leasehold migrate` (the README said
 * "Redis and etcd need none"). etcd does not initialise itself: `migrate` is also its upgrade
 * step, the write that makes older processes stand down.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ROOT, Sandbox } from './helpers.js';
import { selectedStores } from '../helpers/stores.js';
import { etcdAdmin } from '../helpers/etcd-store.js';

const sb = new Sandbox('store-setup');
after(() => sb.cleanup());
const stores = readFileSync(join(ROOT, 'docs', 'stores.md'), 'utf8').replace(/\s+/g, ' ');
const readme = readFileSync(join(ROOT, 'README.md'), 'utf8').replace(/\s+/g, ' ');
const prefix = (): string => `lh-setup-${Math.random().toString(36).slice(2, 10)}`;

void describe('the docs say which stores need `leasehold migrate`, and run agrees', () => {
  void it('etcd: exit 3 naming migrate on a fresh prefix, runs after migrate; the docs say so', { skip: !selectedStores().includes('etcd') && 'etcd not selected' }, async (t) => {
    const p = prefix();
    const url = `etcd://127.0.0.1:2379?prefix=${p}`;
    t.after(async () => {
      const admin = await etcdAdmin();
      await admin.delete().prefix(`${p}/`);
      admin.close();
    });
    const before = await sb.run(['run', '--name', 'setup', '--store', url, '--no-wait', '--', 'true']);
    assert.equal(before.code, 3, before.stderr);
    assert.match(before.stderr, /leasehold migrate/);
    assert.equal((await sb.run(['migrate', '--store', url])).code, 0);
    const after = await sb.run(['run', '--name', 'setup', '--store', url, '--no-wait', '--', 'true']);
    assert.equal(after.code, 0, after.stderr);
    for (const doc of [stores, readme]) assert.doesNotMatch(doc, /etcd needs? none|Redis and etcd need none/);
    assert.match(stores, /and so does etcd/);
    assert.match(readme, /PostgreSQL, MySQL and etcd need `leasehold migrate` once/);
  });

  void it('Redis: runs on a fresh prefix without migrate; the docs say it needs none', { skip: !selectedStores().includes('redis') && 'redis not selected' }, async () => {
    const r = await sb.run(['run', '--name', 'setup', '--store', `redis://127.0.0.1:6379/0?prefix=${prefix()}`, '--no-wait', '--', 'true']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(stores, /Redis needs none/);
    assert.match(readme, /SQLite and Redis need none/);
  });
});
