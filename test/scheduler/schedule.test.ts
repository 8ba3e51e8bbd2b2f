import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError } from '../../src/core/errors.js';
import { cronSchedule, everySchedule, slotsBetween, type Schedule } from '../../src/scheduler/schedule.js';
import { startCron } from '../../src/scheduler/cron.js';
import { world } from '../unit/harness.js';
import { MemoryLedger } from './memory-ledger.js';

const iso = (ms: number): string => new Date(ms).toISOString();
const at = (s: string): number => Date.parse(s);

void describe('schedules', () => {
  void it('a 02:30 daily job in Europe/Berlin runs once on the spring-forward day, at 03:00 CEST, and once on the fall-back day', () => {
    const s = cronSchedule('30 2 * * *', 'Europe/Berlin');
    // 2025-03-30: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    assert.deepEqual(slotsBetween(s, at('2025-03-29T00:00:00Z'), at('2025-03-31T23:59:59Z')).map(iso), [
      '2025-03-29T01:30:00.000Z', // 02:30 CET
      '2025-03-30T01:00:00.000Z', // the first instant after the gap: 03:00 CEST
      '2025-03-31T00:30:00.000Z', // 02:30 CEST
    ]);
    // 2025-10-26: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice, the job runs once.
    assert.deepEqual(slotsBetween(s, at('2025-10-25T00:00:00Z'), at('2025-10-27T23:59:59Z')).map(iso), [
      '2025-10-25T00:30:00.000Z',
      '2025-10-26T00:30:00.000Z',
      '2025-10-27T01:30:00.000Z',
    ]);
  });

  void it('a period is aligned to the epoch, so every replica computes the same slots', () => {
    const s = everySchedule(5000);
    assert.equal(s.next(at('2026-01-01T00:00:03.123Z')), at('2026-01-01T00:00:05Z'));
    assert.equal(s.next(at('2026-01-01T00:00:05Z')), at('2026-01-01T00:00:10Z'), 'strictly after');
    assert.deepEqual(slotsBetween(s, at('2026-01-01T00:00:00Z'), at('2026-01-01T00:00:15Z')).length, 3);
  });

  void it('bad expressions, unknown zones and periods under 1s are ConfigErrors that say what to write', () => {
    assert.throws(() => cronSchedule('61 * * * *'), (e: unknown) => e instanceof ConfigError && /not a cron expression.*minute/.test(e.message));
    assert.throws(() => cronSchedule('every day'), (e: unknown) => e instanceof ConfigError && /5 fields/.test(e.message));
    assert.throws(() => cronSchedule('* * * * *', 'Mars/Olympus'), (e: unknown) => e instanceof ConfigError && /time zone "Mars\/Olympus" is unknown/.test(e.message));
    assert.throws(() => everySchedule(500), ConfigError);
  });

  void it('an expression that can never fire is a ConfigError, not a leader that runs nothing for ever', () => {
    for (const e of ['0 0 30 2 *', '0 0 31 4 *', '0 0 0 30 2 *']) {
      assert.throws(() => cronSchedule(e), (x: unknown) => x instanceof ConfigError && /never fires/.test(x.message) && /5 fields/.test(x.message), e);
    }
    // Rare is not never: 29 February comes every four years.
    assert.equal(iso(cronSchedule('0 0 29 2 *').next(at('2026-12-02T00:00:00Z'))!), '2028-02-29T00:00:00.000Z');
  });

  void it("croner's 7-field form (a year last) is refused with the forms that are accepted", () => {
    assert.throws(
      () => cronSchedule('0 0 0 1 1 * 2030'),
      (x: unknown) => x instanceof ConfigError && /has 7 fields/.test(x.message) && /5 fields .*6 with seconds first.*@yearly/.test(x.message),
    );
  });

  void it('5 fields, 6 with seconds first and the @nicknames are accepted', () => {
    const from = at('2026-12-02T10:00:00Z');
    assert.equal(iso(cronSchedule('30 2 * * *').next(from)!), '2026-12-03T02:30:00.000Z');
    assert.equal(iso(cronSchedule('*/5 * * * * *').next(from)!), '2026-12-02T10:00:05.000Z');
    assert.equal(iso(cronSchedule('@yearly').next(from)!), '2027-01-01T00:00:00.000Z');
    assert.equal(iso(cronSchedule('@monthly').next(from)!), '2027-01-01T00:00:00.000Z');
    assert.equal(iso(cronSchedule('@daily').next(from)!), '2026-12-03T00:00:00.000Z');
  });
});

void describe('startCron with a schedule that has no slot', () => {
  void it('one with no next slot is refused at start; one that ends while leading stops the cron with an error', async () => {
    const w = world();
    try {
      const ledger = new MemoryLedger(w.store, () => w.clock.outsideNow());
      const never: Schedule = { description: 'never', next: () => null };
      assert.throws(() => startCron(w.leasehold(), ledger, 'never', { schedule: never, ttl: 30_000 }, () => undefined), (e: unknown) => e instanceof ConfigError && /never fires/.test(e.message));
      // Two slots, a second apart, then none.
      const first = Math.ceil(w.clock.outsideNow() / 1000) * 1000 + 1000;
      const twice: Schedule = { description: 'twice', next: (after) => (after < first ? first : after < first + 1000 ? first + 1000 : null) };
      const ran: number[] = [];
      const cron = startCron(w.leasehold(), ledger, 'twice', { schedule: twice, ttl: 30_000 }, (ctx) => void ran.push(ctx.slotAtMs));
      const errors: unknown[] = [];
      cron.on('error', (e) => errors.push(e));
      await w.clock.until(() => errors.length > 0, 10_000);
      assert.deepEqual(ran, [first, first + 1000]);
      assert.ok(errors[0] instanceof ConfigError && /has no slot after/.test(errors[0].message), String(errors[0]));
      // The ended schedule holds nothing: its lease is free for anyone.
      await w.clock.until(() => !cron.lease.isLeader, 10_000);
      await cron.stop();
    } finally {
      await w.close();
    }
  });
});
