import { ConfigError } from '../core/errors.js';
import { validateLeaseName } from '../core/config.js';
import { AGENT_LEASE_PREFIX, type Labels } from './port.js';

// Label keys are matched inside JSON paths (SQLite's json_extract) and JSON containment
// (PostgreSQL's @>): a plain alphabet keeps both exact and needs no quoting rules.
const KEY = /^[A-Za-z0-9][A-Za-z0-9_.\/-]{0,62}$/;
const VALUE = /^[A-Za-z0-9_.:\/-]{0,200}$/;

/**
 * Checks a label set: keys `[A-Za-z0-9][A-Za-z0-9_./-]*` (at most 63), values of the same
 * alphabet plus `:` (at most 200, may be empty). Returns a copy with the keys sorted.
 * @throws {ConfigError}
 */
export function validateLabels(labels: unknown): Labels {
  if (labels === undefined) return {};
  if (labels === null || typeof labels !== 'object' || Array.isArray(labels)) throw new ConfigError('labels must be an object of string values, like { zone: "eu-1" }');
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (!KEY.test(k)) throw new ConfigError(`label key ${JSON.stringify(k)} is not valid: use letters, digits, _ . / - (at most 63, starting with a letter or digit)`);
    if (typeof v !== 'string' || !VALUE.test(v)) {
      throw new ConfigError(`label ${k}=${JSON.stringify(v)} has an invalid value: use letters, digits, _ . : / - (at most 200)`);
    }
    out[k] = v;
  }
  return out;
}

/** `zone=eu-1,gpu=true` as the CLI takes it. An empty string is no labels. @throws {ConfigError} */
export function parseLabels(text: string | undefined): Labels {
  if (text === undefined || text.trim() === '') return {};
  const labels: Record<string, string> = {};
  for (const part of text.split(',')) {
    const eq = part.indexOf('=');
    if (eq <= 0) throw new ConfigError(`label ${JSON.stringify(part)} is not key=value; write --labels zone=eu-1,gpu=true`);
    const key = part.slice(0, eq).trim();
    if (key in labels) throw new ConfigError(`label ${key} is given twice in ${JSON.stringify(text)}`);
    labels[key] = part.slice(eq + 1).trim();
  }
  return validateLabels(labels);
}

function renamed(err: unknown, what: string): never {
  if (err instanceof ConfigError) throw new ConfigError(err.message.replace(/^lease name/, what), { cause: err });
  throw err;
}

/** Agent ids follow the lease-name rules (they name the lease `agent/<id>`), without slashes or commas. @throws {ConfigError} */
export function validateAgentId(id: unknown): string {
  if (typeof id !== 'string' || id === '') throw new ConfigError('agent id must be a non-empty string, for example "web-1"');
  if (/[\/,]/.test(id)) throw new ConfigError(`agent id ${JSON.stringify(id)} contains / or ,; use letters, digits and - _ . :`);
  try {
    validateLeaseName(id);
    validateLeaseName(`${AGENT_LEASE_PREFIX}${id}`);
  } catch (err) {
    renamed(err, 'agent id');
  }
  return id;
}

// What a new agent may be called: the alphabet its messages have always named. Ids already
// registered under the looser lease-name rules are still accepted where an agent is looked up
// (reassign --from, drain), so such an agent can still be moved off and drained.
const NEW_AGENT_ID = /^[A-Za-z0-9_.:-]+$/;

/**
 * The id an agent registers under: letters, digits and - _ . : only (no spaces, no < > or
 * quotes: it is printed in shells, logs and URLs unquoted), within the lease-name length.
 * @throws {ConfigError}
 */
export function validateNewAgentId(id: unknown): string {
  if (typeof id === 'string' && id !== '' && !NEW_AGENT_ID.test(id)) {
    const bad = [...id].find((c) => !NEW_AGENT_ID.test(c))!;
    throw new ConfigError(
      `agent id ${JSON.stringify(id)} contains ${bad === ' ' ? 'a space' : JSON.stringify(bad)}; use letters, digits and - _ . : only, for example "web-1"`,
    );
  }
  return validateAgentId(id);
}

/** Resource names follow the lease-name rules. @throws {ConfigError} */
export function validateResource(resource: unknown): string {
  try {
    return validateLeaseName(resource);
  } catch (err) {
    return renamed(err, 'resource name');
  }
}
