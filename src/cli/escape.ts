/**
 * Text from the store (revocation reasons, holders, slot reasons, agent ids and labels written by
 * an older leasehold or by another program) on its way to a terminal. A reason such as
 * `ok\e[2J\e]0;title\a\rspoof` printed raw clears the operator's screen, retitles the window and
 * overwrites the line it is on: what `history` shows would no longer be what the store holds.
 * Every human-readable output passes stored text through {@link escapeControls}; JSON output
 * does not (JSON.stringify escapes C0 itself, and a reader of JSON wants the exact string).
 */

/**
 * Controls (C0, DEL, C1: Unicode Cc), the bidirectional controls that reorder how a line reads
 * (as lease names refuse them, src/core/config.ts), and the line and paragraph separators.
 */
const UNSAFE = /[\p{Cc}\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069\u2028\u2029]/gu;

const NAMED: Readonly<Record<string, string>> = { '\t': '\\t', '\n': '\\n', '\r': '\\r' };

function spell(c: string): string {
  const named = NAMED[c];
  if (named !== undefined) return named;
  const code = c.codePointAt(0)!;
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u{${code.toString(16).toUpperCase()}}`;
}

/**
 * `text` with every control character spelled out as a visible escape (`\x1b`, `\x07`, `\r`,
 * `\n`, `\x9b`, `\u{202E}`), so one stored value prints as one line that cannot drive the
 * terminal. Idempotent (a backslash is left as it is), so a line may pass through it twice.
 */
export function escapeControls(text: string): string {
  return text.replace(UNSAFE, spell);
}

/** What JSON.stringify leaves raw that a terminal still acts on: DEL, C1, bidi controls, U+2028/2029. */
const JSON_UNSAFE = /[\u007f-\u009f\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069\u2028\u2029]/gu;

/**
 * Serialized JSON with the controls JSON.stringify leaves raw written as `\u` escapes. They can
 * only occur inside strings, so the document parses to the same values: `--json` output stays
 * exactly what the store holds, and a terminal it is printed on is not driven by it.
 */
export function jsonSafe(json: string): string {
  return json.replace(JSON_UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
