/**
 * The dashboard's one page: HTML, CSS and a small script, shipped as a string so the package's
 * own `tsc` build is all it needs. Read-only: the script opens one EventSource and renders what
 * it is sent; it never sends anything back. Every value from the store goes in as text
 * (textContent, SVG attributes), never as markup: holder ids and revocation reasons are data.
 *
 * Time to expiry ticks by the store's clock: each state carries the store's now; the page keeps
 * the offset between it and the browser's clock at receipt and counts down from there.
 * Timeline colours follow the chaos timeline's: one hue per token (golden-angle steps over the
 * hues no event mark uses), a term
 * as a bar in its token's colour, events as ticks.
 *
 * The fleet view lists agents, then resources (one page) with owner-dead rows highlighted.
 * Three views on the one page, each with an anchor (#view-leases, #view-schedules, #view-fleet): plain links,
 * no buttons or forms, so nothing on the page can look like a write action.
 */
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>leasehold dashboard</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:20px 24px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 4px}
.sub{color:#666;font-size:12px;margin-bottom:14px}
.warn{background:#fff3cd;border:1px solid #e0b000;padding:8px 10px;margin:0 0 12px;border-radius:4px}
.err{background:#fde2e1;border:1px solid #c0392b;padding:8px 10px;margin:0 0 12px;border-radius:4px}
table{border-collapse:collapse;width:100%;margin-bottom:18px}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #e6e6e6;font-size:13px;vertical-align:top}
th{font-weight:600;color:#555;background:#fafafa}
td.mono,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.state{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;color:#fff}
.state.held{background:#2e8b57}.state.expired{background:#e67e22}.state.free{background:#7f8c8d}
.dot{display:inline-block;width:8px;height:8px;border-radius:4px;margin-right:6px;background:#bbb}
.dot.live{background:#2e8b57}.dot.down{background:#c0392b}
.tl{margin:4px 0 14px}
.tl h3{font-size:13px;margin:8px 0 2px;font-family:ui-monospace,Menlo,Consolas,monospace}
.legend{font-size:11px;color:#555}
.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:14px;height:8px;margin-right:4px;vertical-align:middle}
.empty{color:#777}
nav{margin:0 0 12px;font-size:13px}nav a{margin-right:14px;color:#1f5f99}
h2{font-size:15px;margin:18px 0 6px}
.state.live{background:#2e8b57}.state.draining{background:#b7950b}.state.stale{background:#c0392b}.state.deregistered{background:#7f8c8d}
.slot{display:inline-block;padding:0 6px;border-radius:8px;font-size:11px;color:#fff}
.slot.succeeded{background:#2e8b57}.slot.failed{background:#c0392b}.slot.interrupted{background:#d35400}.slot.skipped{background:#7f8c8d}.slot.claimed{background:#2471a3}
.mark{display:inline-block;margin-left:6px;padding:0 5px;border:1px solid #c0392b;color:#c0392b;border-radius:3px;font-size:11px}
tr.gap td{color:#c0392b;font-size:12px;background:#fdf2f1}
tr.ownerdead td{background:#fde2e1}
.sched{margin:0 0 16px}.sched h3{font-size:13px;margin:6px 0 2px}
.meta{font-size:12px;color:#555;margin-bottom:4px}
</style>
</head>
<body>
<h1>leasehold</h1>
<div class="sub"><span class="dot" id="conn"></span><span id="connText">connecting…</span> · <span id="storeDesc" class="mono"></span> · store clock <span id="storeClock" class="mono"></span> · read-only</div>
<div id="remote" class="warn" hidden></div>
<div id="error" class="err" hidden></div>
<nav><a href="#view-leases">Leases</a><a href="#view-schedules">Schedules</a><a href="#view-fleet">Fleet</a></nav>
<h2 id="view-leases">Leases <span class="legend">(job leases; agents' liveness leases are under Fleet)</span></h2>
<table>
<thead><tr><th>lease</th><th>state</th><th>holder</th><th>token</th><th>expires in (store clock)</th><th>last change</th></tr></thead>
<tbody id="leases"><tr><td colspan="6" class="empty">waiting for the first reading…</td></tr></tbody>
</table>
<h2 style="font-size:14px;margin:6px 0">Timeline <span class="legend" id="window"></span></h2>
<div class="legend"><span><i style="background:hsl(200,65%,45%)"></i>term (colour per token)</span><span><i style="background:#c0392b;width:3px"></i>revoked</span><span><i style="background:#555;width:3px"></i>released</span><span><i style="background:#8e44ad;width:3px"></i>conflict (clone)</span><span><i style="background:repeating-linear-gradient(-45deg,#e67e22 0 2px,#fff 2px 4px)"></i>expired, not yet taken</span></div>
<div id="timelines"></div>
<h2 id="view-schedules">Schedules <span class="legend">(leases with slots in the slot ledger, newest slot first; times by the store's clock)</span></h2>
<div id="schedErr" class="err" hidden></div>
<div id="schedList"><div class="empty">waiting for the first reading…</div></div>
<h2 id="view-fleet">Fleet <span class="legend" id="fleetRead"></span></h2>
<div id="fleetErr" class="err" hidden></div>
<table>
<thead><tr><th>agent</th><th>state</th><th>heartbeat age (store clock)</th><th>labels</th><th>owned</th><th>started</th></tr></thead>
<tbody id="agents"><tr><td colspan="6" class="empty">waiting for the first reading…</td></tr></tbody>
</table>
<div class="legend">A highlighted agent is stale or deregistered and still owns resources: their owner is dead until they are reassigned.</div>
<h2 style="font-size:14px;margin:12px 0 6px">Resources <span class="legend" id="resourcesNote"></span></h2>
<table>
<thead><tr><th>resource</th><th>owner</th><th>owner state (store clock)</th><th>generation</th><th>placed</th></tr></thead>
<tbody id="resources"><tr><td colspan="5" class="empty">waiting for the first reading…</td></tr></tbody>
</table>
<div class="sub" id="stats"></div>
<script>
(function () {
  'use strict';
  var state = null;
  var offset = 0; // store clock - browser clock, at the last receipt
  var $ = function (id) { return document.getElementById(id); };
  var SVGNS = 'http://www.w3.org/2000/svg';
  // Hues 45-245 only (yellow through blue): red, orange and purple mark revoked, expired and
  // conflict, and a token's bar must never read as one of them (token 2 used to be purple).
  function hue(token) { var n = 0; try { n = Number(BigInt(token) % 1000n); } catch (e) {} return Math.round(45 + ((n * 137.508) % 200)); }
  function color(token, l) { return 'hsl(' + hue(token) + ',65%,' + (l || 45) + '%)'; }
  function fmt(ms) {
    var a = Math.abs(Math.round(ms));
    if (a < 1000) return a + 'ms';
    if (a < 60000) return (a < 10000 ? (a / 1000).toFixed(1) : Math.round(a / 1000)) + 's';
    if (a < 3600000) return Math.floor(a / 60000) + 'm' + String(Math.floor((a % 60000) / 1000)).padStart(2, '0') + 's';
    return Math.floor(a / 3600000) + 'h' + String(Math.floor((a % 3600000) / 60000)).padStart(2, '0') + 'm';
  }
  function storeNow() { return Date.now() + offset; }
  function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }
  function svg(tag, attrs, title) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (title) { var t = document.createElementNS(SVGNS, 'title'); t.textContent = title; e.appendChild(t); }
    return e;
  }
  function lastChange(l) {
    var h = l.last;
    if (!h) return '';
    var who = h.event === 'revoked' ? 'revoked' + (h.detail ? ': ' + h.detail : '') :
      h.event === 'released' ? 'released by its holder' :
      h.event === 'takeover' ? 'taken over' + (h.previousHolder ? ' from ' + h.previousHolder : '') :
      h.event === 'conflict' ? 'ended: two processes shared the term' + (h.detail ? ' (' + h.detail + ')' : '') :
      'acquired';
    return who + ' · ' + fmt(storeNow() - h.atMs) + ' ago';
  }
  function renderTable() {
    var body = $('leases');
    body.textContent = '';
    if (state.leases.length === 0) { var tr0 = el('tr'); var td0 = el('td', 'empty', 'no leases in this store yet'); td0.colSpan = 6; tr0.appendChild(td0); body.appendChild(tr0); return; }
    state.leases.forEach(function (l) {
      var tr = el('tr'); tr.setAttribute('data-lease', l.name);
      tr.appendChild(el('td', 'mono name', l.name));
      var st = el('td'); var badge = el('span', 'state ' + l.state, l.state); badge.setAttribute('data-state', l.state); st.appendChild(badge); tr.appendChild(st);
      tr.appendChild(el('td', 'mono holder', l.holder || '-'));
      var tk = el('td', 'mono token', l.token); tk.style.color = l.holder ? color(l.token, 35) : '#777'; tr.appendChild(tk);
      // A free lease's expiry is the instant it was released or revoked: nothing to count down.
      var ex = el('td', 'mono expires'); ex.setAttribute('data-expires-at', l.expiresAtMs === null || l.state === 'free' ? '' : String(l.expiresAtMs)); tr.appendChild(ex);
      tr.appendChild(el('td', 'last', lastChange(l)));
      body.appendChild(tr);
    });
    tick();
  }
  function tick() {
    if (!state) return;
    var now = storeNow();
    $('storeClock').textContent = new Date(now).toISOString().replace('T', ' ').replace('Z', '');
    var cells = document.querySelectorAll('td.expires');
    for (var i = 0; i < cells.length; i++) {
      var at = cells[i].getAttribute('data-expires-at');
      if (!at) { cells[i].textContent = '-'; continue; }
      var left = Number(at) - now;
      cells[i].textContent = left >= 0 ? fmt(left) : 'expired ' + fmt(-left) + ' ago';
    }
    // Heartbeat age keeps growing by the store's clock between fleet readings.
    var hbs = document.querySelectorAll('td.heartbeat');
    for (var j = 0; j < hbs.length; j++) {
      var age = hbs[j].getAttribute('data-age');
      hbs[j].textContent = age ? fmt(Number(age) + Math.max(0, now - Number(hbs[j].getAttribute('data-at')))) : '-';
    }
  }
  function renderTimelines() {
    var box = $('timelines');
    box.textContent = '';
    var now = storeNow();
    var first = state.history.length ? state.history[0].atMs : now;
    var span = Math.min(3600000, Math.max(15000, (now - first) * 1.15));
    var from = now - span;
    $('window').textContent = '(last ' + fmt(span) + ', store clock)';
    var W = Math.max(400, box.clientWidth || 900), left = 4, right = 4, plotW = W - left - right;
    var X = function (t) { return left + Math.max(0, Math.min(1, (t - from) / span)) * plotW; };
    state.leases.forEach(function (l) {
      var entries = state.history.filter(function (h) { return h.name === l.name; });
      var wrap = el('div', 'tl'); wrap.setAttribute('data-timeline', l.name);
      wrap.appendChild(el('h3', null, l.name));
      var s = svg('svg', { width: W, height: 44, viewBox: '0 0 ' + W + ' 44', 'font-family': 'ui-monospace,Menlo,Consolas,monospace', 'font-size': 10 });
      s.appendChild(svg('rect', { x: left, y: 2, width: plotW, height: 26, fill: '#fafafa' }));
      // Terms: from an acquisition or takeover to the next entry of this lease (or now).
      entries.forEach(function (h, i) {
        if (h.event !== 'acquired' && h.event !== 'takeover') return;
        var next = entries[i + 1];
        var end = next ? next.atMs : now;
        var x = X(h.atMs), w = Math.max(2, X(end) - x);
        var title = (h.holder || '?') + ' holds token ' + h.token + ' from ' + new Date(h.atMs).toISOString() + (next ? ' to ' + new Date(next.atMs).toISOString() + ' (' + next.event + ')' : ' (current)');
        s.appendChild(svg('rect', { x: x, y: 6, width: w, height: 14, fill: color(h.token, 80), stroke: color(h.token), 'stroke-width': 0.8, 'data-token': h.token }, title));
        s.appendChild(svg('rect', { x: x, y: 22, width: w, height: 5, fill: color(h.token) }));
        if (w > 48) { var t = svg('text', { x: x + 3, y: 17, fill: '#222' }); t.textContent = 'token ' + h.token; s.appendChild(t); }
      });
      if (l.state === 'expired' && l.expiresAtMs !== null) {
        var ex = X(l.expiresAtMs);
        s.appendChild(svg('rect', { x: ex, y: 6, width: Math.max(2, X(now) - ex), height: 14, fill: '#e67e22', opacity: 0.35 }, 'expired at ' + new Date(l.expiresAtMs).toISOString() + ', not yet taken'));
      }
      entries.forEach(function (h) {
        var c = h.event === 'revoked' ? '#c0392b' : h.event === 'released' ? '#555' : h.event === 'conflict' ? '#8e44ad' : null;
        if (!c) return;
        var x = X(h.atMs);
        s.appendChild(svg('line', { x1: x, y1: 2, x2: x, y2: 30, stroke: c, 'stroke-width': 2.5, 'data-event': h.event }, h.event + ' token ' + h.token + (h.detail ? ': ' + h.detail : '') + ' at ' + new Date(h.atMs).toISOString()));
        if (h.event === 'revoked') { var nearEnd = x > W - 220; var rt = svg('text', { x: nearEnd ? x - 4 : x + 4, y: 40, fill: '#c0392b', 'text-anchor': nearEnd ? 'end' : 'start' }); rt.textContent = 'revoked: ' + (h.detail || ''); s.appendChild(rt); }
      });
      wrap.appendChild(s);
      box.appendChild(wrap);
    });
  }
  function when(ms) { return ms === null || ms === undefined ? '-' : new Date(ms).toISOString().slice(0, 19).replace('T', ' '); }
  function row(cells) { var tr = el('tr'); cells.forEach(function (c) { tr.appendChild(c); }); return tr; }
  function renderSchedules() {
    var box = $('schedList');
    box.textContent = '';
    var se = $('schedErr');
    if (state.schedulesError) { se.hidden = false; se.textContent = 'schedules: ' + state.schedulesError; } else se.hidden = true;
    if (state.schedules.length === 0) { box.appendChild(el('div', 'empty', 'no schedules in this store (no lease has slots in the slot ledger)')); return; }
    state.schedules.forEach(function (sc) {
      var wrap = el('div', 'sched'); wrap.setAttribute('data-schedule', sc.name);
      var h = el('h3', 'mono', sc.name + ' '); var b = el('span', 'state ' + sc.state, sc.state); b.setAttribute('data-state', sc.state); h.appendChild(b); wrap.appendChild(h);
      var meta = el('div', 'meta');
      if (sc.state === 'held') {
        meta.appendChild(document.createTextNode('held by ')); meta.appendChild(el('span', 'mono sched-holder', sc.holder));
        meta.appendChild(document.createTextNode(' · token ')); var tk = el('span', 'mono sched-token', sc.token); tk.style.color = color(sc.token, 35); meta.appendChild(tk);
      } else {
        meta.appendChild(document.createTextNode((sc.state === 'expired' ? 'expired, not yet taken (its holder stopped renewing)' : 'not held: between slots (per-slot mode holds the lease only while a slot runs)') + ' · last token ' + sc.token));
      }
      var rec = sc.schedule;
      if (rec) {
        var what = el('span', 'mono sched-expr', rec.description); what.setAttribute('data-expression', rec.expression || '');
        meta.appendChild(document.createTextNode(' · ')); meta.appendChild(what);
        meta.appendChild(document.createTextNode(' · ' + rec.mode + ' · catch-up ' + rec.catchUp + ' within ' + fmt(rec.catchUpWindowMs) +
          ' · next due ' + (sc.nextDueMs === null ? '?' : when(sc.nextDueMs)) + ' (store clock)'));
        if (rec.catchingUp) { var cu = el('span', 'mark catching-up', 'catching up ' + rec.catchingUp.slots + ' slot(s) from ' + new Date(rec.catchingUp.fromMs).toISOString()); meta.appendChild(cu); }
        meta.appendChild(document.createTextNode(' · last success ' + (sc.lastSuccessAtMs === null ? 'never (in the rows read)' : when(sc.lastSuccessAtMs))));
      } else {
        meta.appendChild(document.createTextNode(' · period (from the ledger) ' + (sc.periodMs === null ? '?' : fmt(sc.periodMs)) +
          ' · next due ≈ ' + when(sc.nextDueEstimateMs) + ' (estimated: no schedule record; its replicas write one from this version on) · last success ' + (sc.lastSuccessAtMs === null ? 'never (in the rows read)' : when(sc.lastSuccessAtMs))));
      }
      wrap.appendChild(meta);
      var t = el('table'); var th = el('thead');
      th.appendChild(row(['slot', 'outcome', 'token', 'ran by', 'started', 'took', 'reason'].map(function (x) { return el('th', null, x); })));
      t.appendChild(th);
      var tb = el('tbody');
      sc.slots.forEach(function (sl) {
        var out = el('td'); var badge = el('span', 'slot ' + sl.status, sl.status === 'claimed' ? 'running' : sl.status); out.appendChild(badge);
        if (sl.missed) out.appendChild(el('span', 'mark', 'missed'));
        if (sl.status === 'interrupted' || /interrupted/.test(sl.reason || '')) out.appendChild(el('span', 'mark', sl.status === 'interrupted' ? 'interrupted' : 'rerun'));
        var tr = row([el('td', 'mono', when(sl.slotAtMs)), out, el('td', 'mono', sl.token), el('td', 'mono', sl.holder || '-'), el('td', 'mono', when(sl.startedAtMs)),
          el('td', 'mono', sl.startedAtMs !== null && sl.endedAtMs !== null ? fmt(sl.endedAtMs - sl.startedAtMs) : '-'), el('td', 'reason', (sl.reason || '') + (sl.exitCode !== null && sl.exitCode !== 0 ? ' (exit ' + sl.exitCode + ')' : ''))]);
        tr.setAttribute('data-slot', sl.key); tr.setAttribute('data-status', sl.status); if (sl.missed) tr.setAttribute('data-missed', 'true');
        tb.appendChild(tr);
        if (sl.gapBefore > 0) {
          var g = el('tr', 'gap'); g.setAttribute('data-gap', String(sl.gapBefore));
          var gc = el('td', null, sl.gapBefore + ' slot' + (sl.gapBefore > 1 ? 's' : '') + ' before this one have no record: missed beyond the catch-up window, or never due'); gc.colSpan = 7; g.appendChild(gc); tb.appendChild(g);
        }
      });
      t.appendChild(tb); wrap.appendChild(t); box.appendChild(wrap);
    });
  }
  function renderFleet() {
    var f = state.fleet, body = $('agents');
    var fe = $('fleetErr');
    if (f.error) { fe.hidden = false; fe.textContent = (f.available ? '' : 'fleet: ') + f.error; } else fe.hidden = true;
    $('fleetRead').textContent = f.readAtMs ? '(read ' + fmt(Date.now() - f.readAtMs) + ' ago; every 2s while a page is open)' : '';
    body.textContent = '';
    if (f.agents.length === 0) { var tr0 = el('tr'); var td0 = el('td', 'empty', f.available ? 'no agents registered' : 'no fleet registry on this store'); td0.colSpan = 6; tr0.appendChild(td0); body.appendChild(tr0); return; }
    f.agents.forEach(function (a) {
      var st = el('td'); var b = el('span', 'state ' + a.state, a.state); b.setAttribute('data-state', a.state); st.appendChild(b);
      if (a.ownerDead) st.appendChild(el('span', 'mark', 'owner dead: ' + a.owned + ' resource' + (a.owned > 1 ? 's' : '')));
      var hb = el('td', 'mono heartbeat'); hb.setAttribute('data-age', a.heartbeatAgeMs === null ? '' : String(a.heartbeatAgeMs)); hb.setAttribute('data-at', String(a.storeNowMs));
      var labels = Object.keys(a.labels).map(function (k) { return k + '=' + a.labels[k]; }).join(', ');
      var tr = row([el('td', 'mono', a.id), st, hb, el('td', 'mono', labels || '-'), el('td', 'mono owned', String(a.owned)), el('td', 'mono', when(a.startedAtMs))]);
      tr.setAttribute('data-agent', a.id); if (a.ownerDead) tr.className = 'ownerdead';
      body.appendChild(tr);
    });
    tick();
  }
  function renderResources() {
    var f = state.fleet, body = $('resources');
    $('resourcesNote').textContent = f.resourcesMore ? '(the first ' + f.resources.length + ' by name; leasehold fleet resources lists them all)' : '(by name; highlighted: the owner on record is dead)';
    body.textContent = '';
    if (f.resources.length === 0) { var tr0 = el('tr'); var td0 = el('td', 'empty', f.available ? 'no resources on record' : 'no fleet registry on this store'); td0.colSpan = 5; tr0.appendChild(td0); body.appendChild(tr0); return; }
    f.resources.forEach(function (r) {
      var st = el('td'); var b = el('span', 'state ' + (r.ownerState === 'live' ? 'live' : r.ownerState), r.ownerState); b.setAttribute('data-owner-state', r.ownerState); st.appendChild(b);
      if (r.ownerDead) st.appendChild(el('span', 'mark', 'owner dead'));
      var tr = row([el('td', 'mono', r.resource), el('td', 'mono owner', r.agent), st, el('td', 'mono generation', r.generation), el('td', 'mono', when(r.placedAtMs))]);
      tr.setAttribute('data-resource', r.resource); if (r.ownerDead) tr.className = 'ownerdead';
      body.appendChild(tr);
    });
  }
  var shown = {};
  /** Whether this section's data differs from what was last rendered (and remembers it if so). */
  function fresh(section, data) {
    var text = JSON.stringify(data);
    if (shown[section] === text) return false;
    shown[section] = text;
    return true;
  }
  function render() {
    $('storeDesc').textContent = state.store;
    var r = $('remote');
    if (state.remote) { r.hidden = false; r.textContent = 'This dashboard listens on ' + state.listen + ', not only on loopback: anyone who can reach it sees every lease and holder.'; } else r.hidden = true;
    var e = $('error');
    if (state.error) { e.hidden = false; e.textContent = 'store unreachable: ' + state.error + ' (showing the last reading; retrying)'; } else e.hidden = true;
    // A state arrives with every store read (several a second); most change only the counters. A
    // section is rebuilt only when its own data changed, so ten open pages cost the browser little
    // more than one (CI saw the tenth of ten pages not render within 30s on a loaded host).
    if (fresh('leases', state.leases)) renderTable();
    if (fresh('timelines', [state.leases, state.history])) renderTimelines();
    if (fresh('schedules', [state.schedules, state.schedulesError])) renderSchedules();
    if (fresh('fleet', state.fleet)) { renderFleet(); renderResources(); }
    $('stats').textContent = 'store reads: ' + state.reads.total + ' (lists ' + state.reads.list + ', histories ' + state.reads.history + ', slot ledgers ' + state.reads.ledger + ', schedule records ' + state.reads.records + ', fleet ' + state.reads.fleet + ', resource pages ' + state.reads.resources + ') since ' + fmt(state.uptimeMs) + ' ago · browsers connected: ' + state.clients;
  }
  function connect() {
    var es = new EventSource('events');
    es.addEventListener('state', function (ev) {
      state = JSON.parse(ev.data);
      offset = state.storeNowMs - Date.now();
      $('conn').className = 'dot live'; $('connText').textContent = 'live';
      render();
    });
    es.onerror = function () { $('conn').className = 'dot down'; $('connText').textContent = 'reconnecting…'; };
  }
  setInterval(tick, 200);
  setInterval(function () {
    if (!state) return;
    renderTimelines();
    var rows = document.querySelectorAll('#leases tr[data-lease]');
    state.leases.forEach(function (l, i) { var td = rows[i] && rows[i].querySelector('td.last'); if (td) td.textContent = lastChange(l); });
  }, 1000);
  connect();
})();
</script>
</body>
</html>
`;
