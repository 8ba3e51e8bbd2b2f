/**
 * Agents as real processes: `leasehold agent` (bin/leasehold.js) or the jittery fixture, each
 * a child this file tracks so a test can kill -9 one and the `after` hook can reap the rest.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

const BIN = fileURLToPath(new URL('../../../bin/leasehold.js', import.meta.url));
const JITTERY = fileURLToPath(new URL('./jittery-agent.js', import.meta.url));

export class AgentProcess {
  readonly child: ChildProcess;
  stdout = '';
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(
    readonly id: string,
    args: string[],
    script = BIN,
  ) {
    this.child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    running.add(this);
    this.child.stdout!.on('data', (d: Buffer) => (this.stdout += d.toString()));
    this.child.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.exited = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        running.delete(this);
        resolve({ code, signal });
      });
    });
  }

  /** Resolves once the agent printed that it is live; rejects if it exited first or took too long. */
  async live(timeoutMs = 15_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (!/live/.test(this.stdout)) {
      if (this.child.exitCode !== null || this.child.signalCode !== null) throw new Error(`agent ${this.id} exited before going live: ${this.stderr}`);
      if (Date.now() > until) throw new Error(`agent ${this.id} not live after ${timeoutMs}ms: ${this.stderr}`);
      await sleep(20);
    }
  }

  kill(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }
}

const running = new Set<AgentProcess>();

/** `leasehold agent --id ID --store URL ...` as a child process. */
export function startCliAgent(url: string, id: string, extra: string[] = []): AgentProcess {
  return new AgentProcess(id, ['agent', '--id', id, '--store', url, ...extra]);
}

/** The jittery fixture: an agent whose event loop stalls at random, so its heartbeats come late. */
export function startJitteryAgent(url: string, id: string, config: { heartbeatMs: number; staleAfterMs: number; maxStallMs: number }): AgentProcess {
  return new AgentProcess(id, [JSON.stringify({ url, id, ...config })], JITTERY);
}

/** Kills every agent still running (after hooks). */
export async function reapAgents(): Promise<void> {
  const all = [...running];
  for (const a of all) a.kill('SIGKILL');
  await Promise.all(all.map((a) => a.exited));
}

/** `leasehold ...` to completion. */
export function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    c.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    c.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}
