/**
 * A holder's release, as the store sends it: one call of the schema's `release` function, which
 * ends the term if the row still holds our holder id and one of our nonces, or hands it to a
 * registered waiter (sql/006-handover.ts says what it does, why it is a function, and why a
 * plain release may skip the WAL flush; since sql/019-handover-one-lease.ts it does so for its
 * one row without going through release_many). Answered true when it ended our term.
 */
export function releaseStatement(s: string): string {
  return `SELECT ${s}.release($1, $2, $3::text[]) AS released`;
}
