/**
 * Agents as real processes: `leasehold agent` (bin/leasehold.js) or the jittery fixture, each
 * a child this file tracks so a test can kill -9 one and the `after` hook can reap the rest.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
    // A diagnostic report on SIGUSR2: an agent that never goes live says where it is waiting.
    this.reportDir = mkdtempSync(join(tmpdir(), `leasehold-agent-${id}-`));
    this.child = spawn(process.execPath, ['--report-on-signal', `--report-directory=${this.reportDir}`, script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    running.add(this);
    this.child.stdout!.on('data', (d: Buffer) => (this.stdout += d.toString()));
    this.child.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
    this.exited = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        running.delete(this);
        rmSync(this.reportDir, { recursive: true, force: true });
        resolve({ code, signal });
      });
    });
  }

  /**
   * Resolves once the agent printed that it is live; rejects at once if it exited first. The
   * bound only stops a hang (start-up is not what these files test), as whenReady's
   * (test/integrations/replicas.ts): a stressed run saw an agent not yet live after 15 s, its
   * diagnostic report still being written.
   */
  async live(timeoutMs = 120_000): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (!/live/.test(this.stdout)) {
      if (this.child.exitCode !== null || this.child.signalCode !== null) throw new Error(`agent ${this.id} exited before going live: ${this.stderr}`);
      if (Date.now() > until) throw new Error(`agent ${this.id} not live after ${timeoutMs}ms: stderr ${JSON.stringify(this.stderr)}, stdout ${JSON.stringify(this.stdout)}; ${await this.report()}`);
      await sleep(20);
    }
  }

  private readonly reportDir: string;

  /** The process's JavaScript stack and open handles, from a Node diagnostic report (SIGUSR2). */
  private async report(): Promise<string> {
    try {
      this.child.kill('SIGUSR2');
      for (let i = 0; i < 50 && readdirSync(this.reportDir).length === 0; i++) await sleep(20);
      const file = readdirSync(this.reportDir)[0];
      if (file === undefined) return 'no diagnostic report';
      const r = JSON.parse(readFileSync(join(this.reportDir, file), 'utf8')) as { javascriptStack?: { stack?: string[] }; libuv?: { type: string; is_active: boolean; remoteEndpoint?: unknown; ms?: number }[] };
      const handles = (r.libuv ?? []).filter((h) => h.is_active).map((h) => `${h.type}${h.remoteEndpoint === undefined ? '' : ` ${JSON.stringify(h.remoteEndpoint)}`}${h.ms === undefined ? '' : ` ${h.ms}ms`}`);
      return `report: stack ${JSON.stringify(r.javascriptStack?.stack?.slice(0, 8) ?? [])}, active handles ${JSON.stringify(handles)}`;
    } catch (err) {
      return `no diagnostic report (${(err as Error).message})`;
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

/** Kills every agent still running, or those of `only` (after hooks; a file's stores run side by side). */
export async function reapAgents(only?: Iterable<AgentProcess>): Promise<void> {
  const all = only === undefined ? [...running] : [...only].filter((a) => running.has(a));
  for (const a of all) a.kill('SIGKILL');
  await Promise.all(all.map((a) => a.exited));
}

/**
 * `leasehold ...` to completion. Every command these files run answers and exits (a `--no-wait`
 * agent refused, a `fleet` lookup); one still running after `hangMs` is killed and reported with
 * its output as a hang, instead of holding the file until the runner's 12-minute bound (a loaded
 * run once saw a `--no-wait` agent register and run on, because the agent it was to be refused
 * by had died).
 */
export function cli(args: string[], hangMs = 120_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const hang = setTimeout(() => {
      stderr += `\n[test] still running after ${hangMs} ms: killed (leasehold ${args.join(' ')})`;
      c.kill('SIGKILL');
    }, hangMs);
    c.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    c.on('exit', (code) => {
      clearTimeout(hang);
      resolve({ code, stdout, stderr });
    });
  });
}
