/**
 * `leasehold fleet ls|resources|place|owner|reassign|drain|undrain`: the operator's view of the
 * fleet registry. Each is one store call (`resources`: one per page); errors carry their own exit
 * codes (common.ts EXIT).
 */
import { parseLabels } from '../fleet/labels.js';
import { openFleet } from '../fleet/open.js';
import { OwnerDeadError } from '../fleet/errors.js';
import type { ResourceRow } from '../fleet/fleet.js';
import { EXIT, formatMs, logFormatOption, openStoreFromFlags, out, reportError, requireCurrentSchema, setLogContext, table, toJson, usageError } from './common.js';
import { escapeControls as esc } from './escape.js';
import { LOG_FLAGS, STORE_FLAGS, defineCommand, helpText, parseCommand } from './flags.js';

export const FLEET_SPEC = defineCommand({
  name: 'fleet',
  operands: 'ls|resources|place|owner|reassign|drain|undrain [RESOURCE|AGENT]',
  summary: 'The fleet registry: list agents or resources, place a resource, look up or move its owner, drain.',
  about: `The fleet registry (see \`leasehold agent\`).
  fleet ls                                  agents: live (by the store's clock), draining, owned
  fleet resources [--after R] [--limit N]   resources in name order with owner, generation and
                                            the owner's state by the store's clock: live, or
                                            owner dead (stale, deregistered); read a page at a
                                            time; --limit stops after N and names the next --after
  fleet place RESOURCE [--labels K=V,...]   give RESOURCE to a live, non-draining agent with those
                                            labels (fewest owned; random among equals); the
                                            chosen agent id is the last line
  fleet owner RESOURCE                      the live owner and generation (exit 0); exit 4 if
                                            there is no owner on record, 5 if the owner on record
                                            is not alive. It never places anything.
  fleet reassign RESOURCE --from AGENT [--to AGENT]
                                            move it (only if AGENT owns it), with a new generation
  fleet drain AGENT / fleet undrain AGENT   keep AGENT alive and owning, out of placement`,
  flags: {
    labels: { type: 'string', value: 'K=V,...', help: 'place: only agents carrying all of these labels' },
    from: { type: 'string', value: 'AGENT', help: 'reassign: the owner it must have now (required)' },
    to: { type: 'string', value: 'AGENT', help: 'reassign: the new owner (live, not draining); default: picked as place picks' },
    after: { type: 'string', value: 'RESOURCE', help: 'resources: start after this name (the next --after a --limit run printed)' },
    limit: { type: 'string', value: 'N', help: 'resources: at most N (default: every resource)' },
    ...STORE_FLAGS,
    json: { type: 'boolean', help: 'one JSON document on stdout (generations are strings)' },
    ...LOG_FLAGS,
  },
  footer: `Exit 0 success; 2 usage or unknown agent; 3 store unreachable or schema missing; 4 no owner
on record (owner); 5 owner on record not alive (owner); 6 no live, non-draining agent can take
it (place, reassign); 7 already owned (place) or owner is not --from (reassign).`,
});

const SUBCOMMANDS = ['ls', 'resources', 'place', 'owner', 'reassign', 'drain', 'undrain'] as const;
/** Records per store read of `fleet resources`. */
const RESOURCES_PAGE = 500;
type Sub = (typeof SUBCOMMANDS)[number];

export async function fleetCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(FLEET_SPEC, argv);
  if (values.help === true) {
    out(helpText(FLEET_SPEC));
    return EXIT.OK;
  }
  setLogContext({ format: logFormatOption(values['log-format']) });
  const [sub, operand, ...extra] = positionals;
  if (sub === undefined || !(SUBCOMMANDS as readonly string[]).includes(sub)) {
    throw usageError(`fleet needs one of ${SUBCOMMANDS.join(', ')}${sub === undefined ? '' : `, got ${JSON.stringify(sub)}`}; see leasehold fleet --help`);
  }
  const wants = sub === 'ls' || sub === 'resources' ? 0 : 1;
  if ((operand === undefined ? 0 : 1) + extra.length !== wants) {
    throw usageError(wants === 0 ? `fleet ${sub} takes no operand` : `fleet ${sub} takes exactly one ${sub === 'drain' || sub === 'undrain' ? 'AGENT' : 'RESOURCE'}`);
  }
  if (values.labels !== undefined && sub !== 'place') throw usageError('--labels goes with fleet place');
  if ((values.from !== undefined || values.to !== undefined) && sub !== 'reassign') throw usageError('--from and --to go with fleet reassign');
  if (sub === 'reassign' && values.from === undefined) throw usageError('fleet reassign needs --from AGENT: the owner it must have now');
  if ((values.after !== undefined || values.limit !== undefined) && sub !== 'resources') throw usageError('--after and --limit go with fleet resources');
  if (values.limit !== undefined && !/^[1-9]\d{0,8}$/.test(values.limit)) throw usageError(`--limit ${JSON.stringify(values.limit)} is not a count; give a whole number of at least 1`);
  const labels = parseLabels(values.labels);
  const json = values.json === true;

  const { store } = await openStoreFromFlags(values);
  try {
    await requireCurrentSchema(store);
    const fleet = await openFleet(store);
    switch (sub as Sub) {
      case 'ls': {
        const agents = await fleet.agents();
        if (json) {
          out(toJson(agents));
          return EXIT.OK;
        }
        if (agents.length === 0) {
          out(`no agents in ${store.description}`);
          return EXIT.OK;
        }
        out(
          table(
            ['AGENT', 'STATE', 'OWNED', 'LAST HEARTBEAT', 'LABELS'],
            agents.map((a) => [
              a.id,
              a.deregistered ? 'gone' : !a.live ? 'stale' : a.draining ? 'draining' : 'live',
              String(a.owned),
              a.heartbeatAgeMs === null ? '-' : `${formatMs(Math.max(0, Math.round(a.heartbeatAgeMs)))} ago`,
              Object.entries(a.labels).map(([k, v]) => `${k}=${v}`).join(',') || '-',
            ]),
          ),
        );
        return EXIT.OK;
      }
      case 'resources': {
        const max = values.limit === undefined ? Infinity : Number(values.limit);
        const rows: ResourceRow[] = [];
        let after = values.after;
        let next: string | null = null;
        do {
          const page = await fleet.resources({ ...(after === undefined ? {} : { after }), limit: Math.min(RESOURCES_PAGE, max - rows.length) });
          rows.push(...page.resources);
          next = page.next;
          after = next ?? undefined;
        } while (next !== null && rows.length < max);
        if (json) {
          out(toJson({ resources: rows, next }));
          return EXIT.OK;
        }
        if (rows.length === 0) out(`no resources on record in ${store.description}${values.after === undefined ? '' : ` after ${esc(values.after)}`}`);
        else {
          out(
            table(
              ['RESOURCE', 'OWNER', 'GENERATION', 'OWNER STATE', 'LAST HEARTBEAT'],
              rows.map((r) => [
                r.resource,
                r.agent,
                String(r.generation),
                r.ownerState === 'live' ? 'live' : `owner dead (${r.ownerState})`,
                r.heartbeatAgeMs === null ? '-' : `${formatMs(Math.max(0, Math.round(r.heartbeatAgeMs)))} ago`,
              ]),
            ),
          );
        }
        if (next !== null) out(esc(`more after ${next}: --after ${JSON.stringify(next)}`));
        return EXIT.OK;
      }
      case 'place': {
        const p = await fleet.place(operand!, { labels });
        out(json ? toJson(p) : `${esc(`placed ${p.resource} on agent ${p.agent} (generation ${p.generation})`)}\n${esc(p.agent)}`);
        return EXIT.OK;
      }
      case 'owner': {
        try {
          const o = await fleet.owner(operand!);
          // Only what does not change while nothing changes: the same words however often asked.
          out(json ? toJson(o) : esc(`${o.agent} generation ${o.generation} live`));
          return EXIT.OK;
        } catch (err) {
          if (!(err instanceof OwnerDeadError)) throw err;
          if (json) {
            out(toJson({ resource: err.resource, agent: err.owner, generation: err.generation, live: false, staleForMs: err.staleForMs, deregistered: err.deregistered }));
          } else {
            out(esc(`${err.owner} generation ${err.generation} dead`));
          }
          reportError(err, 'fleet');
          return EXIT.OWNER_DEAD;
        }
      }
      case 'reassign': {
        const p = await fleet.reassign(operand!, { from: values.from!, ...(values.to === undefined ? {} : { to: values.to }) });
        out(json ? toJson(p) : `${esc(`reassigned ${p.resource} from ${values.from} to agent ${p.agent} (generation ${p.generation})`)}\n${esc(p.agent)}`);
        return EXIT.OK;
      }
      case 'drain':
      case 'undrain': {
        await (sub === 'drain' ? fleet.drain(operand!) : fleet.undrain(operand!));
        out(json ? toJson({ agent: operand, draining: sub === 'drain' }) : esc(`agent ${operand} ${sub === 'drain' ? 'draining: no new placements' : 'undrained'}`));
        return EXIT.OK;
      }
    }
  } finally {
    await store.close();
  }
}
