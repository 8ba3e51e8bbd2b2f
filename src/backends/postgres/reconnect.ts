/**
 * How long the LISTEN connection waits before its next reconnect attempt. Exponential from 250 ms,
 * jittered to half-to-whole, and capped low: while it is down every follower of this store hears
 * no release and waits for expiry, and the usual reason it is down is a restart or a promotion
 * that takes seconds, after which it should be back within about one cap, not after a 30 s sleep
 * begun while the server was still away. An attempt against a server that is down costs one
 * refused connection.
 */
export const LISTEN_RECONNECT_CAP_MS = 2000;

/** The delay before reconnect attempt `attempt` (1, 2, ...); `random` in [0, 1). */
export function listenReconnectDelayMs(attempt: number, random: number): number {
  return Math.min(LISTEN_RECONNECT_CAP_MS, 250 * 2 ** Math.min(attempt, 7)) * (0.5 + random / 2);
}
