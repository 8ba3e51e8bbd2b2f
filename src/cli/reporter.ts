/** What `leasehold run` and `leasehold cron` say on stderr, as text or JSON lines. */
import type { Term } from '../core/lease.js';
import type { LoggerLike } from '../core/logger.js';
import { err } from './common.js';
import { escapeControls, jsonSafe } from './escape.js';
import type { LogFormat } from './run-args.js';

type Fields = Record<string, unknown>;

/**
 * Everything the runner says, one line each on stderr: `leasehold[NAME]: ...` as text, or one
 * JSON object per line for a log collector. JSON lines carry the current term's token (a
 * string: it overflows a JSON number after 2^53) and holder once there is a term.
 */
export class Reporter {
  private term: { token: string; holder: string } | undefined;

  constructor(
    private readonly name: string,
    readonly format: LogFormat,
    private readonly quiet: boolean,
  ) {}

  forTerm(t: Term): void {
    this.term = { token: t.token.toString(), holder: t.holder };
  }

  /** Progress; --quiet drops it. `line` replaces the usual `leasehold[NAME]: msg` text. */
  event(event: string, msg: string, fields: Fields = {}, line?: string): void {
    if (!this.quiet) this.write('info', event, msg, fields, line);
  }

  /** Something that went wrong; printed whatever --quiet says. */
  problem(event: string, msg: string, fields: Fields = {}, line?: string): void {
    this.write('error', event, msg, fields, line);
  }

  /** For the library: its warnings and errors, with their fields; dropped by --quiet like progress. */
  logger(): LoggerLike {
    const write =
      (level: 'warn' | 'error') =>
      (obj: object, msg?: string): void => {
        if (this.quiet) return;
        const fields = Object.fromEntries(Object.entries(obj as Fields).filter(([k, v]) => k !== 'lease' && v !== undefined));
        const text = (msg ?? '').replace(/^leasehold: /, '');
        const shown = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === 'string' ? v : stringify(v)}`);
        this.write(level, 'log', text, fields, `leasehold[${this.name}]: ${text}${shown.length > 0 ? ` (${shown.join(', ')})` : ''}`);
      };
    const noop = (): void => {};
    return { debug: noop, info: noop, warn: write('warn'), error: write('error') };
  }

  private write(level: string, event: string, msg: string, fields: Fields, line: string | undefined): void {
    if (this.format === 'text') err(escapeControls(line ?? `leasehold[${this.name}]: ${msg}`));
    else err(stringify({ ts: new Date().toISOString(), level, event, name: this.name, ...this.term, ...fields, msg }));
  }
}

function stringify(v: unknown): string {
  return jsonSafe(JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? x.toString() : x)) ?? String(v));
}
