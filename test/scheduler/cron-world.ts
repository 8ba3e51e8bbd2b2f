/**
 * The fake-clock set-up the scheduler's unit-style tests share: one world per test (../unit/harness)
 * and the crons started in it, stopped and the world closed after each test.
 */
import { afterEach } from 'node:test';
import type { CronHandle } from '../../src/scheduler/cron.js';
import { world, type World } from '../unit/harness.js';

export function useCronWorld(): { world(): World; crons: CronHandle[] } {
  let w: World | undefined;
  const crons: CronHandle[] = [];
  afterEach(async () => {
    for (const c of crons.splice(0)) await c.stop();
    await w?.close();
    w = undefined;
  });
  return { world: () => (w = world()), crons };
}
