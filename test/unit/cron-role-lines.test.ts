/**
 * The role lines of a `leasehold cron` replica (src/cli/role-lines.ts): "following" once per
 * other replica, "taking over" after such a line, and never a line about itself (CI4 of
 * 2026-12-06: a per-slot replica that found its own earlier slot's term still holding the lease,
 * its release in flight, printed "following: <its own id>" and then "taking over" from itself).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RoleLines } from '../../src/cli/role-lines.js';
import type { Reporter } from '../../src/cli/reporter.js';
import type { Term } from '../../src/core/lease.js';

function lines(mode: 'per-slot' | 'leader', self = 'me'): { roles: RoleLines; said: string[]; who: { id: string } } {
  const said: string[] = [];
  const report = { event: (event: string, msg: string) => void said.push(`${event}: ${msg}`) } as unknown as Reporter;
  const who = { id: self };
  return { roles: new RoleLines(report, mode, 'every 1s', () => who.id), said, who };
}
const term = (token: bigint, holder: string): Term => ({ token, holder }) as unknown as Term;

void describe('cron role lines', () => {
  void it("per-slot: a busy answer naming this replica's own holder says nothing, and the term after it is not a takeover", () => {
    const { roles, said } = lines('per-slot');
    roles.busy('me', 900);
    roles.acquired(term(5n, 'me'));
    assert.deepEqual(said, []);
  });

  void it('per-slot: another replica is followed once, however many slots it wins; the next term won is a takeover from it', () => {
    const { roles, said } = lines('per-slot');
    roles.busy('other', 900);
    roles.busy('other', 800);
    roles.busy('me', 700);
    roles.acquired(term(6n, 'me'));
    roles.busy('other', 900);
    assert.equal(said.length, 2, said.join('\n'));
    assert.match(said[0]!, /^following: following: other holds the lease/);
    assert.match(said[1]!, /^taking-over: .*after following other/);
  });

  void it('a new identity (fork, restore): the old id is another replica now, and is followed', () => {
    const { roles, said, who } = lines('per-slot');
    roles.busy('me', 900);
    who.id = 'me-2';
    roles.busy('me', 900);
    assert.equal(said.length, 1, said.join('\n'));
    assert.match(said[0]!, /following: me holds/);
  });

  void it('leader: following once per leader, said again after a loss; its own holder is never followed', () => {
    const { roles, said } = lines('leader');
    roles.busy('me', 3000);
    roles.busy('l1', 3000);
    roles.busy('l1', 2000);
    roles.acquired(term(7n, 'me'));
    roles.lost();
    roles.busy('l1', 3000);
    assert.deepEqual(
      said.map((l) => l.split(':')[0]),
      ['following', 'acquired', 'following'],
      said.join('\n'),
    );
    assert.match(said[1]!, /taking over from l1: leader: token 7/);
  });
});
