/**
 * `leasehold agent`: one fleet agent in the foreground. It holds the liveness lease
 * `agent/<id>` and its row in the fleet registry until SIGTERM/SIGINT, when it deregisters and
 * releases. Signal handling for this command lives here and nowhere else.
 */
import { Leasehold } from '../core/leasehold.js';
import { errorMessage, type LeaseLostError } from '../core/errors.js';
import { Agent, DEFAULT_HEARTBEAT_MS, DEFAULT_STALE_AFTER_MS, resolveAgentTiming } from '../fleet/agent.js';
import { parseLabels, validateNewAgentId } from '../fleet/labels.js';
import { openFleet } from '../fleet/open.js';
import {
  EXIT,
  cliLog,
  durationOption,
  flagOrEnv,
  formatMs,
  logFormatOption,
  openStoreFromFlags,
  out,
  portOption,
  setLogContext,
  toJsonLine,
  usageError,
} from './common.js';
import { HTTP_HOST_FLAG, LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';
import { livenessOption } from './run-args.js';
import { storeOnceReachable, type StoreWaitLines } from './store-wait.js';

export const AGENT_SPEC = defineCommand({
  name: 'agent',
  summary: 'Run a fleet agent: heartbeat under an id until SIGTERM, which deregisters it.',
  about: `Runs one fleet agent in the foreground. It takes the liveness lease agent/ID (TTL =
--stale-after, renewed every --heartbeat), then registers ID with its labels, and prints one
line when it is live. Placement (\`leasehold fleet place\`) only picks agents whose lease is
unexpired by the store's clock. SIGTERM or SIGINT deregisters and releases (exit 0). If the
lease is lost (the store did not hear a heartbeat in time, an operator revoked it, or a forked
or restored copy of this process heartbeated under the same term) the agent stands down and
exits 76; restart it to rejoin.`,
  flags: {
    id: { type: 'string', value: 'ID', required: true, help: "the agent's id (the lease agent/ID)" },
    labels: { type: 'string', value: 'K=V,...', help: 'labels placement can require, e.g. zone=eu-1,gpu=true' },
    heartbeat: { type: 'string', value: 'D', help: 'how often to heartbeat', default: formatMs(DEFAULT_HEARTBEAT_MS) },
    'stale-after': {
      type: 'string',
      value: 'D',
      help: 'how long after the last heartbeat the store stops counting the agent alive; at least 2x --heartbeat',
      default: formatMs(DEFAULT_STALE_AFTER_MS),
    },
    wait: {
      type: 'string',
      value: 'D',
      or: 'no-wait',
      help: "how long to wait while the store is unreachable or another process holds agent/ID (a crashed predecessor's lease runs out)",
      default: '--stale-after + --heartbeat',
    },
    'no-wait': { type: 'boolean', help: 'exit 75 at once if another process is agent ID, and 3 if the store does not answer the first try' },
    liveness: {
      type: 'string',
      value: 'MODE',
      default: 'ttl',
      help:
        "ttl: a dead agent's lease ends at its expiry (--stale-after). session (PostgreSQL, MySQL/MariaDB, SQLite): the lease is also tied to a connection of " +
        "this process's own (on SQLite, to the process), so an agent restarted under the same ID takes over within milliseconds of this one's death, and on " +
        'PostgreSQL placement stops counting it alive at once; refused (exit 2) where the mode is (Redis, etcd, a pooler, short server keepalive). See docs/liveness.md',
    },
    'metrics-port': {
      type: 'string',
      value: 'P',
      env: 'LEASEHOLD_METRICS_PORT',
      help:
        "serve Prometheus metrics at http://HOST:P/metrics: this agent's liveness lease (leasehold_leader{lease=\"agent/ID\"}) and the " +
        'fleet as the store sees it (leasehold_fleet_agents{state}, per-agent owned count and heartbeat age); needs prom-client; 0: any free port',
    },
    'health-port': {
      type: 'string',
      value: 'P',
      env: 'LEASEHOLD_HEALTH_PORT',
      help: 'serve /healthz (503 only when the agent believes it is live but has not heartbeated within --stale-after) and /readyz (200 while live) at http://HOST:P (0: any free port)',
    },
    ...HTTP_HOST_FLAG,
    ...STORE_FLAGS,
    json: { type: 'boolean', help: 'one line of JSON per event on stdout: { event: live|serving|lost|stopped, id, token, ... }' },
    ...LOG_FLAGS,
  },
  footer: `Exit 0 after SIGTERM/SIGINT (deregistered); 2 usage (stale-after below 2x heartbeat, bad id
or labels); 3 store unreachable (at once with --no-wait, else when --wait runs out) or schema
missing; 75 another process is agent ID (--no-wait, or --wait ran out); 76 the liveness lease was
lost (the agent stood down).`,
});

export async function agentCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(AGENT_SPEC, argv);
  if (values.help === true) {
    out(helpText(AGENT_SPEC));
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  if (positionals.length > 0) throw usageError(`agent takes no operands, got ${JSON.stringify(positionals[0])}; write leasehold agent --id ID`);
  if (values.id === undefined) throw usageError('agent needs --id ID');
  // Before the store is opened: a bad id is exit 2 whether or not the store answers.
  validateNewAgentId(values.id);
  if (values['no-wait'] === true && values.wait !== undefined) throw usageError('--wait and --no-wait contradict each other; pick one');
  // No LEASEHOLD_* variables for these: an agent's timing belongs on its command line, where
  // `ps` shows it. An empty environment makes durationOption read the flag only.
  const heartbeat = durationOption(values.heartbeat, 'heartbeat', '', {});
  const staleAfter = durationOption(values['stale-after'], 'stale-after', '', {});
  const wait = values['no-wait'] === true ? false : durationOption(values.wait, 'wait', '', {});
  const liveness = livenessOption(values.liveness, {});
  const labels = parseLabels(values.labels);
  const json = values.json === true;
  const metricsPort = portOption(values['metrics-port'], 'metrics-port', 'LEASEHOLD_METRICS_PORT', process.env);
  const healthPort = portOption(values['health-port'], 'health-port', 'LEASEHOLD_HEALTH_PORT', process.env);
  const httpHost = flagOrEnv(values['http-host'], 'LEASEHOLD_HTTP_HOST')?.value ?? '127.0.0.1';

  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);
  void import('./parent-watch.js').then((m) => m.stopWhenLauncherExits()); // npx's exit stops this as SIGTERM would
  // An unreachable store is waited for within --wait (its default, as the lease's: --stale-after
  // + --heartbeat), as `leasehold run` does: an agent started during an outage (a node rebooted
  // while the database fails over, a loaded store's call deadline) starts once the store answers
  // instead of exiting 3 at once. A missing schema is exit 3 at once. What is left of the wait
  // then bounds the wait for agent/ID.
  const timing = resolveAgentTiming({ ...(heartbeat === undefined ? {} : { heartbeat }), ...(staleAfter === undefined ? {} : { staleAfter }) });
  const storeWait = wait === false ? false : (wait ?? timing.staleAfterMs + timing.heartbeatMs);
  const waitStartedMs = performance.now();
  let reached: Awaited<ReturnType<typeof openStoreFromFlags>> | undefined;
  try {
    reached = await storeOnceReachable(() => openStoreFromFlags(values), storeWait, stop.signal, waitLines(values.id, json), { firstTryUnbounded: true });
  } catch (err) {
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    throw err;
  }
  if (reached === undefined) {
    // Stopped by a signal while the store was down: never registered, nothing to undo.
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    return EXIT.OK;
  }
  const { store } = reached;
  const waitLeft = typeof storeWait === 'number' ? Math.max(1, storeWait - Math.round(performance.now() - waitStartedMs)) : storeWait;
  const leasehold = new Leasehold({ store, closeStore: true, holderLabel: `agent:${values.id}` });
  let probes: { close(): Promise<void> } | undefined;
  try {
    const fleet = await openFleet(store);
    let agent: Agent;
    try {
      agent = await Agent.start(leasehold, fleet, {
        id: values.id,
        labels,
        ...(heartbeat === undefined ? {} : { heartbeat }),
        ...(staleAfter === undefined ? {} : { staleAfter }),
        wait: waitLeft,
        liveness,
        signal: stop.signal,
      });
    } catch (err) {
      if (stop.signal.aborted) return EXIT.OK;
      throw err;
    }
    const line = (event: string, text: string, extra: Record<string, unknown> = {}): void => {
      if (json) out(toJsonLine({ event, id: agent.id, token: agent.token.toString(), ...extra }));
      else out(text);
    };
    line('live', `agent ${agent.id} live (token ${agent.token}, heartbeat ${formatMs(agent.heartbeatMs)}, stale after ${formatMs(agent.staleAfterMs)})`, {
      labels: agent.labels,
      heartbeatMs: agent.heartbeatMs,
      staleAfterMs: agent.staleAfterMs,
    });
    // After "live": the probes describe a live agent, and a port that cannot be bound stops it (exit 2) like a bad flag.
    if (metricsPort !== undefined || healthPort !== undefined) {
      let served: Awaited<ReturnType<typeof import('../health/serve.js').startProbeServers>>;
      try {
        served = await (await import('../health/serve.js')).startProbeServers({
          leasehold,
          lease: agent.livenessLease,
          host: httpHost,
          metricsPort,
          healthPort,
          registerMore: async (registry) => {
            (await import('../metrics/fleet.js')).registerFleetMetrics(fleet, { registry });
          },
        });
      } catch (err) {
        // Deregistered, not left to go stale: the agent never served its first probe.
        await agent.stop();
        throw err;
      }
      probes = served;
      if (served.metricsUrl !== undefined) line('serving', `agent ${agent.id}: metrics at ${served.metricsUrl}/metrics`, { metrics: `${served.metricsUrl}/metrics` });
      if (served.healthUrl !== undefined) line('serving', `agent ${agent.id}: health at ${served.healthUrl}/healthz and /readyz`, { health: `${served.healthUrl}/healthz` });
    }
    const lost = await new Promise<LeaseLostError | undefined>((resolve) => {
      agent.once('lost', resolve);
      if (stop.signal.aborted) resolve(undefined);
      else stop.signal.addEventListener('abort', () => resolve(undefined), { once: true });
    });
    if (lost !== undefined) {
      cliLog().error(`agent ${agent.id} stood down: ${errorMessage(lost)}`, { exitCode: EXIT.LOST, reason: lost.reason });
      line('lost', `agent ${agent.id} lost its liveness lease (${lost.reason})`, { reason: lost.reason });
      await agent.stop();
      return EXIT.LOST;
    }
    await agent.stop();
    line('stopped', `agent ${agent.id} deregistered`);
    return EXIT.OK;
  } finally {
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    await probes?.close();
    await leasehold.close();
  }
}

/** The store wait's lines, as the agent's others: JSON on stdout with --json, else log lines on stderr. */
function waitLines(id: string, json: boolean): StoreWaitLines {
  return {
    event: (event, msg, fields) => (json ? out(toJsonLine({ event, id, ...fields })) : cliLog().info(`agent ${id}: ${msg}`, fields)),
    problem: (event, msg, fields) => (json ? out(toJsonLine({ event, id, ...fields, message: msg })) : cliLog().warn(`agent ${id}: ${msg}`, fields)),
  };
}
