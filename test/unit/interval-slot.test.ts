/**
 * How an @Interval fire (a setInterval started at boot) is named on the shared epoch grid:
 * simulated timers, no clock. Node reschedules an interval from the moment its callback was
 * processed, so lateness accumulates (the phase only creeps forward), and the time the callback
 * reads is a little later again, by an amount that does not accumulate.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { intervalSlot, type IntervalFire } from '../../src/scheduler/schedule.js';

const P = 1000;

/** A deterministic PRNG (mulberry32), so each case is the same run every time. */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The wall times a setInterval(P) started at `startMs` is read at, fire by fire. */
function fires(startMs: number, n: number, lateMs: () => number, readMs: () => number, stall?: { at: number; ms: number }): number[] {
  const out: number[] = [];
  let due = startMs + P;
  for (let i = 0; i < n; i++) {
    const processed = due + lateMs() + (stall?.at === i ? stall.ms : 0);
    out.push(processed + readMs());
    due = processed + P;
  }
  return out;
}

function name(times: number[]): number[] {
  let previous: IntervalFire | undefined;
  return times.map((t) => {
    const slotAtMs = intervalSlot(P, t, previous);
    previous = { slotAtMs, firedAtMs: t };
    return slotAtMs;
  });
}

/** Slots named twice, and slots passed over, in a run of names. */
function faults(slots: number[]): { twice: number; passedOver: number } {
  let twice = 0;
  let passedOver = 0;
  for (let i = 1; i < slots.length; i++) {
    const step = (slots[i]! - slots[i - 1]!) / P;
    if (step <= 0) twice++;
    else passedOver += step - 1;
  }
  return { twice, passedOver };
}

const T0 = Date.UTC(2026, 2, 30, 1, 5, 0);

void describe('intervalSlot: an @Interval fire on the shared grid', () => {
  void it('a timer whose phase sits at the grid edge, read a few ms either side of it, names every slot once, in order', () => {
    // Started 1 ms before a second's edge: each fire is read 0-6 ms after it was processed.
    const r = rng(1);
    const times = fires(T0 - 1 - P, 60, () => r() * 0.05, () => r() * 6);
    const floor = times.map((t) => Math.floor(t / P) * P);
    const old = faults(floor);
    assert.ok(old.twice > 0 && old.passedOver > 0, `the aligned period each fire fell in flipped neither way here: this case would prove nothing (${JSON.stringify(old)})`);
    const slots = name(times);
    assert.deepEqual(faults(slots), { twice: 0, passedOver: 0 });
    for (const [i, s] of slots.entries()) assert.ok(s - times[i]! <= 6, 'a slot further ahead of its fire than the fires were read late');
  });

  void it('read up to a quarter period late (a loaded host) without accumulating: consecutive, within a quarter period ahead of and a period and a quarter behind the fire', () => {
    const r = rng(2);
    for (const phase of [0, 10, 500, 990]) {
      const times = fires(T0 + phase - P, 200, () => 0, () => r() * 240);
      const slots = name(times);
      assert.deepEqual(faults(slots), { twice: 0, passedOver: 0 }, `phase ${phase}`);
      for (const [i, s] of slots.entries()) {
        assert.ok(s - times[i]! <= 0.25 * P && times[i]! - s <= 1.25 * P, `phase ${phase}: fire ${i} at +${times[i]! - s} ms from its slot`);
      }
    }
  });

  void it('accumulated lateness: a slot is passed over only when the timer has fallen a whole period behind the grid, once per period of drift', () => {
    // 2 ms late each fire, read 0-30 ms later: 3000 fires drift 6 s, so the timer fires six
    // times fewer than the grid has periods, and no naming can run those six.
    const r = rng(3);
    const times = fires(T0 + 900 - P, 3000, () => 2, () => r() * 30);
    const drift = times.at(-1)! - (T0 + 900 + 2999 * P);
    const slots = name(times);
    const { twice, passedOver } = faults(slots);
    assert.equal(twice, 0);
    assert.equal(passedOver, Math.floor((slots.at(-1)! - slots[0]!) / P) + 1 - slots.length, 'the passed-over count is the grid periods the timer did not fire in');
    assert.ok(passedOver <= Math.ceil(drift / P), `${passedOver} slots passed over for ${drift} ms of drift`);
    const floor = faults(times.map((t) => Math.floor(t / P) * P));
    assert.ok(floor.twice > 0, 'the aligned period each fire fell in never flipped back: this case would prove nothing');
  });

  void it('a fire held back by a blocked event loop: the slots it passed over are not named, the next fires count on from it', () => {
    const times = fires(T0 + 300 - P, 20, () => 1, () => 2, { at: 10, ms: 2300 });
    const slots = name(times);
    const { twice, passedOver } = faults(slots);
    assert.equal(twice, 0);
    assert.equal(passedOver, 2, 'the stall of 2.3 periods passed over two slots');
    for (const [i, s] of slots.entries()) assert.ok(s <= times[i]!, `fire ${i} named a slot ahead of it`);
  });

  void it("two replicas' timers tens of ms apart (not straddling an edge) name the same slot for each period's fires", () => {
    const r = rng(4);
    const a = name(fires(T0 + 300 - P, 300, () => 1, () => r() * 20));
    const b = name(fires(T0 + 380 - P, 300, () => 1, () => r() * 20));
    assert.deepEqual(b, a);
  });
});
