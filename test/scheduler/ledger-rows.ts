/** `leasehold cron history --json` rows, as the per-slot replica tests read them. */
export interface Row {
  slot: string;
  slotAt: string;
  status: string;
  token: string;
  holder: string | null;
  startedAt: string | null;
  endedAt: string | null;
  reason: string | null;
}

/**
 * A slot recorded skipped as an overlap whose previous row's job really was still running at the
 * slot's time (its end at or after it): the rule kept, not a slot lost. Under load a job runs
 * past the next slot, and a replica's first term runs the slot due just before it (up to 2 s late).
 */
export function overlapByRule(rows: readonly Row[], r: Row): boolean {
  const prev = rows[rows.indexOf(r) - 1];
  return r.status === 'skipped' && /^overlap/.test(r.reason ?? '') && prev?.endedAt != null && Date.parse(prev.endedAt) >= Date.parse(r.slotAt);
}
