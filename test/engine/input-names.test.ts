/**
 * Lease names an operator cannot tell apart in `status` are refused: zero-width and other
 * invisible characters, bidirectional overrides, look-alike spaces, leading or trailing spaces,
 * names that are only spaces, and names not in Unicode NFC. The message spells out the hidden
 * character instead of printing it (a raw U+202E would reverse the error line itself).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { validateLeaseName } from '../../src/core/config.js';
import { ConfigError } from '../../src/core/errors.js';

const refused = (name: string, pattern: RegExp): void => {
  assert.throws(
    () => validateLeaseName(name),
    (e: unknown) => {
      assert.ok(e instanceof ConfigError, `${JSON.stringify(name)}: ${String(e)}`);
      assert.equal(e.code, 'CONFIG');
      assert.match(e.message, pattern, JSON.stringify(name));
      assert.doesNotMatch(e.message, /[\u200b-\u200f\u202a-\u202e\u2066-\u2069\u00a0\ufeff]/u, 'the message shows no hidden character raw');
      return true;
    },
    JSON.stringify(name),
  );
};

void describe('lease names that look like other names are refused', () => {
  void it('a bidirectional override, spelled out in the message', () => {
    // Renders as "nightlybilling": a different lease from the one it reads as.
    refused('nightly\u202Egnillib', /"nightly\\u\{202E\}gnillib" contains a bidirectional control \(U\+202E\)/);
    for (const c of ['\u202A', '\u202B', '\u202C', '\u202D', '\u2066', '\u2067', '\u2068', '\u2069', '\u200E', '\u200F', '\u061C']) {
      refused(`a${c}b`, /bidirectional control/);
    }
  });

  void it('zero-width and other invisible characters', () => {
    for (const c of ['\u200B', '\u200C', '\u200D', '\u2060', '\uFEFF', '\u00AD', '\u034F', '\uFE0F', '\u3164', '\u{E0041}']) {
      refused(`job${c}`, /invisible character \(U\+/);
    }
  });

  void it('spaces that are not U+0020, and line or paragraph separators', () => {
    for (const c of ['\u00A0', '\u2007', '\u202F', '\u3000', '\u2028', '\u2029']) refused(`nightly${c}billing`, /space other than U\+0020/);
  });

  void it('leading or trailing spaces, and names that are only spaces', () => {
    refused(' job', /starts or ends with a space/);
    refused('job ', /starts or ends with a space/);
    refused('   ', /is only spaces/);
    refused(' ', /is only spaces/);
  });

  void it('a name not in NFC, showing the combining mark and the composed spelling', () => {
    refused('cafe\u0301', /"cafe\\u\{301\}" is not in Unicode NFC form.*"caf\\u\{E9\}"/);
  });

  void it('private-use characters and lone surrogates', () => {
    refused('job\uE000', /private-use character/);
    refused('job\uD800', /lone surrogate/);
  });

  void it('control characters, as before', () => {
    refused('bad\nname', /control character \(U\+000A\)/);
    refused('bell\u0007', /control character/);
    refused('del\u007F', /control character/);
    refused('c1\u0085', /control character/);
  });
});

void describe('ordinary names stay valid', () => {
  void it('every name the tests, the demo and the README use, and readable non-ASCII', () => {
    const names = [
      'nightly-billing', 'reconciler', 'migration', 'job', 'job2', 'x', 'a', 'm', 'p', 'cron', 'default-store', 'seq-job',
      'sig-job', 'revoke-me', 'held', 'free', 'env-job', 'from-flag', 'x'.repeat(200),
      'nightly billing', 'billing/eu-west-1', 'tenant:42.invoices', 'café', 'Ærø', '日本語のジョブ', 'работа', 'job 🙂', 'a_b.c@d',
    ];
    for (const n of names) assert.equal(validateLeaseName(n), n, n);
  });
});
