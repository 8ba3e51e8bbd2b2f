// The etcd placement's window on the load index (src/backends/etcd/fleet-load.ts LoadWindow),
// against an index in memory: whatever has moved since the window was placed, the first step's
// page is the index's first keys, as a read to the index's end would answer them, and a read
// to the end happens only when the window has run low.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LoadWindow, loadKeysOf, type LoadPage } from '../../src/backends/etcd/fleet-load.js';
import type { EtcdKeyValue, EtcdRequestOp } from '../../src/backends/etcd/client.js';

const WALK = 32;
const REFILL = WALK / 4;
const l = loadKeysOf('p/fleet/');
const key = (owned: number, id: string): string => `${l.loadPrefix}${String(owned).padStart(12, '0')}/${id}`;

/** An index in memory: etcd's range in key order, with `limit` and `more`; counts the keys each range spans. */
function index(owned: Map<string, number>): { range(from: Buffer, end: Buffer, limit: number): LoadPage; spanned: number } {
  const out = {
    spanned: 0,
    range(from: Buffer, end: Buffer, limit: number): LoadPage {
      const keys = [...owned].map(([id, o]) => Buffer.from(key(o, id))).sort(Buffer.compare);
      const inRange = keys.filter((k) => Buffer.compare(k, from) >= 0 && Buffer.compare(k, end) < 0);
      out.spanned += inRange.length;
      const kvs = inRange.slice(0, limit).map((k) => ({ key: k, value: Buffer.from('{}') }) as unknown as EtcdKeyValue);
      return { kvs, more: inRange.length > limit };
    },
  };
  return out;
}

const END = Buffer.from(`${l.loadPrefix.slice(0, -1)}0`);

async function place(w: LoadWindow, ix: ReturnType<typeof index>): Promise<LoadPage> {
  const head = w.first();
  const r = (head.op as Required<Pick<EtcdRequestOp, 'request_range'>>).request_range;
  const first = ix.range(r.key, r.range_end!, Number(r.limit));
  return w.page(first.kvs, first.more, head.bound, async (from, limit) => ix.range(from, END, limit));
}

void test('each placement\'s first page is the index\'s first keys, however agents moved since; a read to the end only when the window runs low', async () => {
  const agents = 1000;
  const owned = new Map(Array.from({ length: agents }, (_, i) => [`a${String(i).padStart(4, '0')}`, 0]));
  const ix = index(owned);
  const w = new LoadWindow(l, WALK, REFILL);
  let wholeReads = 0;
  let removed = 0;
  const placements = 300;
  for (let i = 0; i < placements; i++) {
    const spannedBefore = ix.spanned;
    const page = await place(w, ix);
    if (ix.spanned - spannedBefore > 2 * WALK) wholeReads++;
    const unbounded = index(owned).range(Buffer.from(l.loadPrefix), END, WALK);
    assert.ok(page.kvs.length >= REFILL, `placement ${i}: a page of ${page.kvs.length} keys`);
    assert.deepEqual(
      page.kvs.map((kv) => kv.key.toString()),
      unbounded.kvs.slice(0, page.kvs.length).map((kv) => kv.key.toString()),
      `placement ${i}: the page is the index's first keys`,
    );
    assert.equal(page.more, true);
    // A page's agent takes the resource (it moves up, out of the window), and now and then an
    // agent joins at 0 or one in the window leaves.
    const idOf = (kv: EtcdKeyValue): string => kv.key.toString().split('/').at(-1)!;
    const id = idOf(page.kvs[i % page.kvs.length]!);
    owned.set(id, owned.get(id)! + 1);
    if (i % 50 === 7) owned.set(`new-${i}`, 0);
    if (i % 50 === 9) {
      owned.delete(idOf(page.kvs[0]!));
      removed++;
    }
  }
  // The window starts unplaced (one read to the end); after that each refill leaves WALK keys
  // in it, and each placement or removal takes at most one out: it runs low (under REFILL) at
  // most once every WALK - REFILL of them.
  assert.ok(wholeReads <= 1 + Math.ceil((placements + removed) / (WALK - REFILL)), `${wholeReads} reads to the end in ${placements} placements`);
});

void test('an index that ends inside the window: the page says there is no more', async () => {
  const owned = new Map(Array.from({ length: 5 }, (_, i) => [`a${i}`, i]));
  const ix = index(owned);
  const w = new LoadWindow(l, WALK, REFILL);
  const page = await place(w, ix);
  assert.equal(page.kvs.length, 5);
  assert.equal(page.more, false);
  owned.clear();
  const empty = await place(w, ix);
  assert.deepEqual([empty.kvs.length, empty.more], [0, false]);
});
