/**
 * LeaseholdModule's lifecycle, in-process with a real NestJS application context and a real
 * store: forRootAsync takes its options from an injected provider of another module; app.close()
 * releases the @OncePerSlot lease at once (not a TTL later) and closes the store the module
 * opened (its PostgreSQL connections are gone), while a { leasehold, ledger } the app passed in
 * stays open for its owner; and a second application can start in the same process afterwards.
 *
 * The decorators are applied with Reflect.decorate, as TypeScript's experimentalDecorators output
 * does, because this repository's tsconfig compiles standard decorators (see docs/schedules.md).
 */
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule';
import pg from 'pg';
import { Leasehold } from '../../src/core/leasehold.js';
import { Exclusive, LeaseholdModule, OncePerSlot, currentSlot, type LeaseholdModuleOptions } from '../../src/nestjs/index.js';
import { openSlotLedger } from '../../src/backends/index.js';
import { TEST_PG_URL, makeTestStore, selectedStores, type StoreKind, type TestStore } from '../helpers/stores.js';
import { until } from './replicas.js';

const kinds = selectedStores().filter((k): k is StoreKind => k === 'postgres' || k === 'sqlite' || k === 'mysql');
const stores: TestStore[] = [];
after(async () => {
  for (const s of stores) await s.cleanup();
});

// The slots are a second apart (the shortest period a schedule may have); the TTL is long (10 s) so that a lease left held by close() would
// still be held when the test looks, a few milliseconds later.
const TTL = '10s';
const LEASE = 'module-tick';

/** A job class under @Interval(1000) + @OncePerSlot(LEASE) that records the tokens it ran with. */
function jobs(): { Jobs: new () => object; ran: bigint[] } {
  const ran: bigint[] = [];
  class Jobs {
    tick(): void {
      ran.push(currentSlot().token);
    }
  }
  Object.defineProperty(Jobs.prototype, 'tick', Reflect.decorate([Interval(1000), OncePerSlot(LEASE)], Jobs.prototype, 'tick', Object.getOwnPropertyDescriptor(Jobs.prototype, 'tick')) as PropertyDescriptor);
  return { Jobs, ran };
}

async function start(leaseholdModule: ReturnType<typeof LeaseholdModule.forRoot>, Jobs: new () => object): Promise<INestApplicationContext> {
  class AppModule {}
  Reflect.decorate([Module({ imports: [ScheduleModule.forRoot(), leaseholdModule], providers: [Jobs] })], AppModule);
  return NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
}

/** Whether another process could take `name` (default LEASE) right now, without waiting. */
async function leaseIsFree(ts: TestStore, name = LEASE): Promise<boolean> {
  const other = new Leasehold({ store: await ts.open() });
  try {
    const term = await other.lease(name, { ttl: TTL }).acquire({ wait: false });
    return term.token > 0n;
  } catch {
    return false;
  } finally {
    await other.close();
  }
}

async function pgConnections(app: string): Promise<number> {
  const c = new pg.Client({ connectionString: TEST_PG_URL });
  await c.connect();
  try {
    const r = await c.query<{ n: string }>('SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1', [app]);
    return Number(r.rows[0]!.n);
  } finally {
    await c.end();
  }
}

for (const kind of kinds) {
  void describe(`LeaseholdModule on ${kind}`, () => {
    void it('forRootAsync with an injected config: runs slots; app.close() releases the lease at once and closes the store it opened', async () => {
      const ts = await makeTestStore(kind);
      stores.push(ts);
      // PostgreSQL: the module's connections carry a name of their own, to count them after close.
      const appName = `lh-nest-module-${randomBytes(4).toString('hex')}`;
      const url = kind === 'postgres' ? `${ts.url}&application_name=${appName}` : ts.url;
      const CONFIG = Symbol('CONFIG');
      class ConfigModule {}
      Reflect.decorate([Module({ providers: [{ provide: CONFIG, useValue: { url } }], exports: [CONFIG] })], ConfigModule);
      const { Jobs, ran } = jobs();
      const app = await start(
        LeaseholdModule.forRootAsync({
          imports: [ConfigModule],
          inject: [CONFIG],
          useFactory: async (config: { url: string }): Promise<LeaseholdModuleOptions> => ({ store: config.url, ttl: TTL }),
        }),
        Jobs,
      );
      let closed = false;
      try {
        // Startup, a store connection and two one-second slots: seconds on a loaded machine.
        await until('two slots ran', () => ran.length >= 2, 20_000);
        const leasehold = app.get(Leasehold);
        assert.ok(leasehold instanceof Leasehold, 'the module provides Leasehold');
        if (kind === 'postgres') assert.ok((await pgConnections(appName)) > 0, 'the module opened no connection under its application_name: the count below would prove nothing');
        await app.close();
        closed = true;
        assert.ok(await leaseIsFree(ts), `the lease ${LEASE} was still held after app.close(): it would block the other replicas for a TTL`);
        assert.throws(() => leasehold.lease('x'), (e: unknown) => (e as { code?: string }).code === 'CLOSED', 'the Leasehold the module opened is still open after app.close()');
        if (kind === 'postgres') assert.equal(await pgConnections(appName), 0, 'the store the module opened still has connections after app.close()');
        const rows = await (async () => {
          const store = await ts.open();
          const ledger = await openSlotLedger(store, ts.url);
          try {
            return await ledger.records(LEASE);
          } finally {
            await ledger.close();
          }
        })();
        assert.ok(rows.filter((r) => r.status === 'succeeded').length >= 2, JSON.stringify(rows.map((r) => [r.key, r.status])));
        assert.deepEqual(rows.filter((r) => r.status === 'claimed'), [], 'a slot was left claimed by the closed app');
      } finally {
        if (!closed) await app.close();
      }
    });

    void it('before the first fire, each @OncePerSlot and @Exclusive method of a provider contends: their leases are held once the application context is created', async () => {
      const ts = await makeTestStore(kind);
      stores.push(ts);
      let fired = 0;
      // Once a year: no fire during the test, so only startup can have taken the leases.
      class Yearly {
        report(): void {
          fired++;
        }
        poll(): void {
          fired++;
        }
      }
      Object.defineProperty(Yearly.prototype, 'report', Reflect.decorate([Cron('0 0 0 1 1 *'), OncePerSlot('module-yearly')], Yearly.prototype, 'report', Object.getOwnPropertyDescriptor(Yearly.prototype, 'report')) as PropertyDescriptor);
      Object.defineProperty(Yearly.prototype, 'poll', Reflect.decorate([Cron('0 0 0 1 1 *'), Exclusive('module-yearly-leader')], Yearly.prototype, 'poll', Object.getOwnPropertyDescriptor(Yearly.prototype, 'poll')) as PropertyDescriptor);
      const app = await start(LeaseholdModule.forRoot({ store: ts.url, ttl: TTL }), Yearly);
      try {
        assert.equal(await leaseIsFree(ts, 'module-yearly'), false, 'the @OncePerSlot lease was free after startup: its gate would first contend at the first fire, and that fire wait for the acquire');
        assert.equal(await leaseIsFree(ts, 'module-yearly-leader'), false, 'the @Exclusive lease was free after startup');
        assert.equal(fired, 0);
      } finally {
        await app.close();
      }
      assert.ok(await leaseIsFree(ts, 'module-yearly'), 'app.close() left the gate started at startup holding its lease');
      assert.ok(await leaseIsFree(ts, 'module-yearly-leader'), 'app.close() left the elector started at startup holding its lease');
    });

    void it('a lease lost while the method runs: currentSlot().signal aborts, the slot is recorded interrupted and the next term reruns it', async () => {
      const ts = await makeTestStore(kind);
      stores.push(ts);
      const runs: Array<{ slot: string; token: bigint; rerunOf: bigint | null; abortedAfterLoss?: boolean }> = [];
      let leasehold: Leasehold | undefined;
      class Jobs {
        tick(): void {
          const { slot, token, rerunOf, signal } = currentSlot();
          const run: (typeof runs)[number] = { slot, token, rerunOf };
          runs.push(run);
          if (leasehold !== undefined && !runs.some((r) => r.abortedAfterLoss !== undefined)) {
            // The engine's "this process may have been paused" path: every term ends at once.
            leasehold.suspect('manual', 'test');
            run.abortedAfterLoss = signal.aborted;
          }
        }
      }
      Object.defineProperty(Jobs.prototype, 'tick', Reflect.decorate([Interval(1000), OncePerSlot(LEASE)], Jobs.prototype, 'tick', Object.getOwnPropertyDescriptor(Jobs.prototype, 'tick')) as PropertyDescriptor);
      const app = await start(LeaseholdModule.forRoot({ store: ts.url, ttl: TTL }), Jobs);
      try {
        leasehold = app.get(Leasehold);
        await until('the lease was lost in a run', () => runs.some((r) => r.abortedAfterLoss !== undefined), 20_000);
        const lost = runs.find((r) => r.abortedAfterLoss !== undefined)!;
        assert.equal(lost.abortedAfterLoss, true, "the method's signal did not abort when its term ended");
        // The elector contends afresh at once (the lost term was released): a new term, then a fire.
        await until('the lost slot was rerun', () => runs.some((r) => r.slot === lost.slot && r.rerunOf === lost.token), 20_000);
        const rerun = runs.find((r) => r.slot === lost.slot && r.rerunOf === lost.token)!;
        assert.ok(rerun.token > lost.token, 'the rerun ran under a later term');
      } finally {
        await app.close();
      }
      const store = await ts.open();
      const ledger = await openSlotLedger(store, ts.url);
      try {
        const rows = await ledger.records(LEASE);
        const lost = runs.find((r) => r.abortedAfterLoss !== undefined)!;
        const row = rows.find((r) => r.key === lost.slot);
        assert.equal(row?.status, 'succeeded', `the lost slot ${lost.slot} is ${row?.status} (${row?.reason ?? ''})`);
        assert.match(row?.reason ?? '', /rerun: term \d+ was interrupted/);
      } finally {
        await ledger.close();
      }
    });

    void it('app.close() while a job runs: its signal aborts and the slot is recorded interrupted (owed to the next leader), not left claimed', async () => {
      const ts = await makeTestStore(kind);
      stores.push(ts);
      let running: { slot: string; aborted: Promise<void> } | undefined;
      class Jobs {
        async tick(): Promise<void> {
          const { slot, signal } = currentSlot();
          if (running !== undefined) return;
          const aborted = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
          running = { slot, aborted };
          // A job that stops when told, a moment after: app.close() must wait for it before closing the ledger.
          await aborted;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
      Object.defineProperty(Jobs.prototype, 'tick', Reflect.decorate([Interval(1000), OncePerSlot(LEASE)], Jobs.prototype, 'tick', Object.getOwnPropertyDescriptor(Jobs.prototype, 'tick')) as PropertyDescriptor);
      const app = await start(LeaseholdModule.forRoot({ store: ts.url, ttl: TTL }), Jobs);
      try {
        await until('a job is running', () => running !== undefined, 20_000);
      } finally {
        await app.close();
      }
      const store = await ts.open();
      const ledger = await openSlotLedger(store, ts.url);
      try {
        const row = (await ledger.records(LEASE)).find((r) => r.key === running!.slot);
        assert.equal(row?.status, 'interrupted', `the slot running at app.close() is ${row?.status} (${row?.reason ?? ''})`);
      } finally {
        await ledger.close();
      }
    });

    void it('forRoot({ leasehold, ledger }): app.close() releases the lease but leaves the caller\'s Leasehold open; a second app starts in the same process', async () => {
      const ts = await makeTestStore(kind);
      stores.push(ts);
      const store = await ts.open();
      const leasehold = new Leasehold({ store });
      const ledger = await openSlotLedger(store, ts.url);
      try {
        for (const round of [1, 2]) {
          const { Jobs, ran } = jobs();
          const app = await start(LeaseholdModule.forRoot({ leasehold, ledger, ttl: TTL }), Jobs);
          try {
            await until(`round ${round}: a slot ran`, () => ran.length >= 1, 20_000);
            assert.equal(app.get(Leasehold), leasehold, 'the module provides the Leasehold it was given');
          } finally {
            await app.close();
          }
          assert.ok(await leaseIsFree(ts), `round ${round}: the lease was still held after app.close()`);
          // Still the caller's: it takes leases after the app closed.
          const term = await leasehold.lease(`still-open-${round}`, { ttl: TTL }).acquire({ wait: false });
          assert.ok(term.token > 0n);
        }
      } finally {
        await ledger.close();
        await leasehold.close();
        await store.close();
      }
    });
  });
}
