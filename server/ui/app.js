/* giant dashboard: runs, live training curves, shower pictures and
 * evaluations, drawn by hand (SVG and canvas) from the service's API.
 * Plain JavaScript, no framework, nothing fetched but this origin's API.
 *
 * Views (the URL's hash):
 *   #/runs[?status=S]            the runs table, the submit form
 *   #/runs/ID[?compare=ID2]      one run: live curves over SSE, a second run overlaid
 *   #/runs/ID/showers            a sample drawn: mean and single shower, profile, E_tot/E_inc
 *   #/runs/ID/evaluations[/EID]  evaluations: queue one, progress, histograms, AUCs
 *
 * Every API call sends the token kept in sessionStorage; a 401 asks for one. */
'use strict';

const SVGNS = 'http://www.w3.org/2000/svg';
const TOKEN_KEY = 'giant.token';
const FINAL = ['succeeded', 'failed', 'cancelled'];
const GEOMETRY = { layers: 45, alpha: 16, r: 9,         /* CaloChallenge dataset 2 */
                   rEdges: [0, 4.65, 9.3, 13.95, 18.6, 23.25, 27.9, 32.55, 37.2, 41.85] };
const GROUP_LAYERS = 5;                                   /* layers per picture */
const JSON_CHUNK = 100;                                   /* --max-json-showers default */

/* ---------------------------------------------------------------------------
 * Small DOM helpers
 * ------------------------------------------------------------------------- */

function $(sel, root) { return (root || document).querySelector(sel); }
function $all(sel, root) { return Array.from((root || document).querySelectorAll(sel)); }

/* el('div', {class: 'x', onclick: f}, 'text', child, ...) */
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  setAttrs(e, attrs);
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  setAttrs(e, attrs);
  for (const k of kids.flat()) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function setAttrs(e, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'value') e.value = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
}

function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (typeof x !== 'number') return String(x);
  const d = digits === undefined ? 4 : digits;
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(Math.max(1, d - 1));
  return Number(x.toPrecision(d)).toString();
}

function fmtDuration(s) {
  if (s === null || s === undefined) return '';
  s = Math.round(s);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
  return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
}

function toast(msg) {
  const t = $('#toast');
  t.textContent = msg;
  t.classList.remove('hidden');
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => t.classList.add('hidden'), 5000);
}

function statusBadge(s) { return el('span', { class: 'status status-' + s, 'data-status': s }, s); }

function progressCell(p) {
  const f = Math.max(0, Math.min(1, (p && p.fraction) || 0));
  const bar = el('span', { class: 'bar' }, el('span'));
  bar.firstChild.style.width = (100 * f).toFixed(1) + '%';
  const eta = p && p.eta_s !== null && p.eta_s !== undefined ? ', ETA ' + fmtDuration(p.eta_s) : '';
  return el('span', { class: 'progress' }, bar,
            `${(p && p.done_steps) || 0}/${(p && p.total_steps) || 0} (${(100 * f).toFixed(0)}%)${eta}`);
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

/* ---------------------------------------------------------------------------
 * The API: the token, 401 -> ask, 429/503 -> wait Retry-After
 * ------------------------------------------------------------------------- */

class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : 'HTTP ' + status);
    this.status = status;
    this.code = error && error.code;
    this.field = error && error.field;
    this.limit = error && error.limit;      /* too_many_showers: the most a request may ask */
  }
}

function authHeaders() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: 'Bearer ' + t } : {};
}

let tokenPrompt = null;
/* Shows the token form; resolves once a token was entered. One at a time. */
function askToken(reason) {
  if (tokenPrompt) return tokenPrompt;
  tokenPrompt = new Promise((resolve) => {
    const form = $('#token-dialog');
    $('#token-reason').textContent = reason || '';
    form.classList.remove('hidden');
    $('#token-input').focus();
    form.onsubmit = (ev) => {
      ev.preventDefault();
      const v = $('#token-input').value.trim();
      if (!v) return;
      sessionStorage.setItem(TOKEN_KEY, v);
      $('#token-input').value = '';
      form.classList.add('hidden');
      $('#forget-token').classList.remove('hidden');
      tokenPrompt = null;
      resolve();
    };
  });
  return tokenPrompt;
}

async function api(method, path, body, signal) {
  for (let attempt = 0; ; attempt++) {
    const headers = Object.assign({ Accept: 'application/json' }, authHeaders());
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const r = await fetch(path, {
      method, headers, signal, cache: 'no-store',
      body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
    });
    const text = await r.text();
    let j = null;
    try { j = text ? JSON.parse(text) : null; } catch (e) { j = null; }
    if (r.status === 401) {
      const had = !!sessionStorage.getItem(TOKEN_KEY);
      sessionStorage.removeItem(TOKEN_KEY);
      await askToken((had ? 'The token was refused: ' : '') + (j && j.error ? j.error.message : ''));
      continue;
    }
    if ((r.status === 429 || r.status === 503) && r.headers.get('Retry-After') && attempt < 5) {
      const s = Math.min(30, Math.max(1, parseInt(r.headers.get('Retry-After'), 10) || 1));
      await sleep(1000 * s, signal);
      continue;
    }
    if (!r.ok) throw new ApiError(r.status, j && j.error ? j.error : { message: text.slice(0, 200) });
    return j;
  }
}

/* Server-Sent Events over fetch(): EventSource cannot send the
 * Authorization header, and the events route takes only the header.
 * Calls onEvent({id, event, data}) for each event; reconnects with
 * Last-Event-ID until the stream ends with finished() true or signal aborts. */
async function streamEvents(path, lastId, onEvent, finished, signal) {
  let retry = 1000;
  while (!signal.aborted) {
    try {
      const headers = Object.assign({ Accept: 'text/event-stream' }, authHeaders());
      if (lastId) headers['Last-Event-ID'] = String(lastId);
      const r = await fetch(path, { headers, signal, cache: 'no-store' });
      if (r.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        await askToken('The event stream needs a token');
        continue;
      }
      if (!r.ok || !r.body) throw new Error('events: HTTP ' + r.status);
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '', ev = { id: null, event: 'message', data: [] };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          let line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') {
            if (ev.data.length) {
              if (ev.id !== null) lastId = ev.id;
              let data = null;
              try { data = JSON.parse(ev.data.join('\n')); } catch (e) { data = ev.data.join('\n'); }
              onEvent({ id: ev.id, event: ev.event, data });
            }
            ev = { id: null, event: 'message', data: [] };
            continue;
          }
          if (line.startsWith(':')) continue;              /* keep-alive */
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          let val = c < 0 ? '' : line.slice(c + 1);
          if (val.startsWith(' ')) val = val.slice(1);
          if (field === 'id') ev.id = val;
          else if (field === 'event') ev.event = val;
          else if (field === 'data') ev.data.push(val);
          else if (field === 'retry' && /^\d+$/.test(val)) retry = parseInt(val, 10);
        }
      }
      if (await finished()) return lastId;
    } catch (e) {
      if (signal.aborted) return lastId;
    }
    await sleep(retry, signal);
  }
  return lastId;
}

/* ---------------------------------------------------------------------------
 * Router: one view at a time; leaving a view aborts its streams and timers
 * ------------------------------------------------------------------------- */

let viewCtl = null;

function parseHash() {
  const h = location.hash.replace(/^#/, '') || '/runs';
  const [path, qs] = h.split('?');
  return { parts: path.split('/').filter(Boolean), query: new URLSearchParams(qs || '') };
}

function crumbs(items) {
  const c = $('#crumbs');
  c.textContent = '';
  for (const [label, href] of items) c.append(href ? el('a', { href }, label) : el('span', {}, label));
}

async function route() {
  if (viewCtl) viewCtl.abort();
  viewCtl = new AbortController();
  const signal = viewCtl.signal;
  const { parts, query } = parseHash();
  const main = $('#view');
  main.textContent = '';
  try {
    if (parts[0] !== 'runs') { location.hash = '#/runs'; return; }
    if (parts.length === 1) return await viewRuns(main, query, signal);
    const id = parseInt(parts[1], 10);
    if (!(id > 0)) throw new Error('bad run id ' + parts[1]);
    if (parts[2] === 'showers') return await viewShowers(main, id, signal);
    if (parts[2] === 'evaluations') return await viewEvaluations(main, id, parseInt(parts[3], 10) || 0, signal);
    return await viewRun(main, id, parseInt(query.get('compare'), 10) || 0, signal);
  } catch (e) {
    if (signal.aborted) return;
    main.append(el('p', { class: 'error', id: 'view-error' }, 'Error: ' + e.message));
  }
}

/* ---------------------------------------------------------------------------
 * Runs view
 * ------------------------------------------------------------------------- */

const DEFAULT_CONFIG = {
  name: 'dashboard-small',
  model: { stage1: { trunk: { hidden: 64, blocks: 1 } }, stage2: { trunk: { hidden: 64, blocks: 1 } } },
  train: { batch: 64, steps: { stage1: 200, stage2: 200 }, val_every: 50, ckpt_every: 100, log_every: 10 },
};

function runActions(run, after) {
  const box = el('span', { class: 'actions' });
  if (run.status === 'queued' || run.status === 'running') {
    box.append(el('button', {
      type: 'button', class: 'cancel', 'data-run': run.id, disabled: run.cancel_requested,
      onclick: async (ev) => {
        ev.target.disabled = true;
        try { await api('POST', `/v1/runs/${run.id}/cancel`); toast(`run ${run.id}: cancel requested`); }
        catch (e) { toast(`run ${run.id}: ${e.message}`); }
        after();
      },
    }, run.cancel_requested ? 'cancelling' : 'cancel'));
  }
  if (run.status === 'cancelled' || run.status === 'failed') {
    box.append(el('button', {
      type: 'button', class: 'resume', 'data-run': run.id,
      onclick: async (ev) => {
        ev.target.disabled = true;
        try { await api('POST', `/v1/runs/${run.id}/resume`); toast(`run ${run.id}: queued again`); }
        catch (e) { toast(`run ${run.id}: ${e.message}`); }
        after();
      },
    }, 'resume'));
  }
  return box;
}

function bestCell(best, stage) {
  const b = best && best[stage];
  if (!b || b.val_loss === null || b.val_loss === undefined) return el('td', { class: 'num' }, '–');
  return el('td', { class: 'num', title: `step ${b.step}, checkpoint ${b.checkpoint_id}` }, fmt(b.val_loss, 5));
}

async function viewRuns(main, query, signal) {
  crumbs([['runs', null]]);
  const status = query.get('status') || '';
  const filter = el('select', { id: 'status-filter', onchange: (ev) => {
    location.hash = '#/runs' + (ev.target.value ? '?status=' + ev.target.value : '');
  } }, ['', 'queued', 'running', 'succeeded', 'failed', 'cancelled'].map(
    (s) => el('option', { value: s, selected: s === status }, s || 'all')));
  const tbody = el('tbody');
  const more = el('button', { type: 'button', class: 'hidden' }, 'older runs');
  const table = el('table', { id: 'runs-table' },
    el('thead', {}, el('tr', {}, ['id', 'name', 'status', 'device', 'precision', 'progress',
      'best val energy', 'best val shower', 'created', ''].map((h) => el('th', {}, h)))), tbody);
  const empty = el('p', { class: 'muted hidden', id: 'runs-empty' }, 'No runs' + (status ? ' with status ' + status : '') + '.');
  main.append(el('div', { class: 'card' },
    el('div', { class: 'row' }, el('h1', { class: 'grow' }, 'Runs'), el('label', {}, 'status ', filter)),
    table, empty, more));

  let cursor = null, rows = [];
  const render = () => {
    tbody.textContent = '';
    for (const r of rows) {
      tbody.append(el('tr', { 'data-run': r.id, 'data-status': r.status },
        el('td', { class: 'num' }, el('a', { href: `#/runs/${r.id}` }, r.id)),
        el('td', {}, r.name || ''),
        el('td', {}, statusBadge(r.status), r.error && r.status === 'failed' ? el('span', { class: 'error', title: r.error }, ' !') : null),
        el('td', {}, r.device || '–'),
        el('td', {}, r.precision || ''),
        el('td', {}, progressCell(r.progress)),
        bestCell(r.best, 'energy'),
        bestCell(r.best, 'shower'),
        el('td', { class: 'muted' }, (r.created_at || '').replace('T', ' ').replace(/:\d\d\.\d+Z$/, '')),
        el('td', { class: 'links' }, el('a', { href: `#/runs/${r.id}` }, 'curves'), ' ',
          r.status === 'succeeded' ? el('a', { href: `#/runs/${r.id}/showers` }, 'showers') : null, ' ',
          el('a', { href: `#/runs/${r.id}/evaluations` }, 'evaluations'), ' ', runActions(r, refresh))));
    }
    empty.classList.toggle('hidden', rows.length > 0);
  };
  const load = async (append) => {
    const q = new URLSearchParams({ limit: '50' });
    if (status) q.set('status', status);
    if (append && cursor) q.set('cursor', cursor);
    const page = await api('GET', '/v1/runs?' + q, undefined, signal);
    rows = append ? rows.concat(page.items) : page.items;
    cursor = page.next_cursor;
    more.classList.toggle('hidden', !cursor);
    render();
  };
  async function refresh() { try { await load(false); } catch (e) { if (!signal.aborted) toast(e.message); } }
  more.onclick = () => load(true);
  await load(false);
  main.append(submitForm(signal));
  /* Poll while something is queued or running (the list has no stream). */
  (async () => {
    while (!signal.aborted) {
      await sleep(rows.some((r) => !FINAL.includes(r.status)) ? 1500 : 5000, signal);
      if (!signal.aborted && document.visibilityState !== 'hidden') await refresh();
    }
  })();
}

function submitForm(signal) {
  const cfg = Object.assign({}, DEFAULT_CONFIG);
  const ta = el('textarea', { id: 'config', rows: 14, spellcheck: 'false' });
  const errBox = el('div', { id: 'submit-error', class: 'field-error hidden' });
  const result = el('p', { id: 'submit-result', class: 'muted' });
  const form = el('form', { id: 'submit-form', class: 'card' },
    el('h2', {}, 'Submit a run'),
    el('p', { class: 'muted' }, 'A run config (configs/README.md): every field left out takes its default. ',
      'A config with dataset_id trains on that dataset; without a dataset, on simulated showers.'),
    ta, errBox,
    el('div', { class: 'row' }, el('button', { type: 'submit', class: 'primary', id: 'submit-run' }, 'Submit'), result));
  ta.value = JSON.stringify(cfg, null, 2);
  /* Prefill the newest ready dataset-2 dataset, if any. */
  api('GET', '/v1/datasets', undefined, signal).then((d) => {
    const ds = (d.items || []).find((x) => x.status === 'ready' && x.geometry === 'dataset_2');
    if (ds && ta.value === JSON.stringify(cfg, null, 2)) {
      ta.value = JSON.stringify(Object.assign({ name: cfg.name, dataset_id: ds.id }, cfg), null, 2);
    }
  }).catch(() => {});
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    errBox.classList.add('hidden');
    result.textContent = '';
    let body;
    try { body = JSON.parse(ta.value); } catch (e) {
      showFieldError(errBox, ta, null, 'not JSON: ' + e.message);
      return;
    }
    try {
      const run = await api('POST', '/v1/runs', body, signal);
      toast(`run ${run.id} queued`);
      location.hash = `#/runs/${run.id}`;            /* its curves, live */
    } catch (e) {
      showFieldError(errBox, ta, e.field, e.message, e.status);
    }
  };
  return form;
}

/* The server's error next to the field it names: the message, the field's
 * path, and the field's key selected in the textarea. */
function showFieldError(box, ta, field, message, status) {
  box.textContent = '';
  box.setAttribute('data-field', field || '');
  if (field) box.append(el('code', { class: 'field' }, field), ': ');
  if (field && message.startsWith(field + ': ')) message = message.slice(field.length + 2);
  box.append(message + (status ? ` (HTTP ${status})` : ''));
  box.classList.remove('hidden');
  if (!field) return;
  /* Find the last component's key after the keys before it. */
  const keys = field.split('.');
  let pos = 0;
  for (const k of keys) {
    const i = ta.value.indexOf('"' + k + '"', pos);
    if (i < 0) return;
    pos = i;
  }
  const k = keys[keys.length - 1];
  ta.focus();
  ta.setSelectionRange(pos, pos + k.length + 2);
}

/* ---------------------------------------------------------------------------
 * Charts: a line chart in SVG (x: step within the stage; y linear or log)
 * ------------------------------------------------------------------------- */

/* series: [{label, cls, color, dash, points: [[x, mean, min, max], ...]}] */
function lineChart(title, series, opts) {
  const W = 440, H = 240, L = 56, R = 18, T = 8, B = 26;
  const log = !!opts.log;
  const pts = series.flatMap((s) => s.points).filter((p) => p[1] !== null && (!log || p[1] > 0));
  const box = el('div', { class: 'chart', 'data-chart': opts.id });
  box.append(el('h3', {}, title));
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'plot', id: 'chart-' + opts.id });
  box.append(root);
  if (!pts.length) {
    root.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no points yet'));
    return box;
  }
  let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
  const yv = pts.flatMap((p) => (opts.band && p[2] !== null && p[3] !== null ? [p[1], p[2], p[3]] : [p[1]]))
    .filter((v) => v !== null && Number.isFinite(v) && (!log || v > 0));
  let y0 = Math.min(...yv), y1 = Math.max(...yv);
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (log) { y0 = Math.log10(y0); y1 = Math.log10(y1); }
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
  const X = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const Y = (y) => T + (1 - ((log ? Math.log10(y) : y) - y0) / (y1 - y0)) * (H - T - B);
  /* axes and ticks */
  const g = svg('g', {});
  for (let i = 0; i <= 4; i++) {
    const v = y0 + (y1 - y0) * i / 4, yy = T + (1 - i / 4) * (H - T - B);
    g.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: yy, y2: yy }));
    g.append(svg('text', { x: L - 4, y: yy + 3, 'text-anchor': 'end' }, fmt(log ? Math.pow(10, v) : v, 3)));
  }
  for (let i = 0; i <= 4; i++) {
    const v = x0 + (x1 - x0) * i / 4, xx = X(v);
    g.append(svg('text', { x: xx, y: H - B + 14, 'text-anchor': 'middle' }, Math.round(v)));
  }
  g.append(svg('path', { class: 'axis', d: `M${L},${T}V${H - B}H${W - R}` }));
  g.append(svg('text', { x: W - R, y: H - 2, 'text-anchor': 'end' }, 'step'));
  root.append(g);
  for (const s of series) {
    const p = s.points.filter((q) => q[1] !== null && Number.isFinite(q[1]) && (!log || q[1] > 0));
    if (!p.length) continue;
    if (opts.band && p.some((q) => q[2] !== null && q[3] !== null && q[2] !== q[3])) {
      const up = p.map((q) => `${X(q[0]).toFixed(1)},${Y(log ? Math.max(q[3], 1e-300) : q[3]).toFixed(1)}`);
      const dn = p.slice().reverse().map((q) => `${X(q[0]).toFixed(1)},${Y(log ? Math.max(q[2], 1e-300) : q[2]).toFixed(1)}`);
      root.append(svg('path', { class: 'band', d: 'M' + up.concat(dn).join('L') + 'Z', fill: s.color, 'fill-opacity': 0.12, stroke: 'none' }));
    }
    const d = 'M' + p.map((q) => `${X(q[0]).toFixed(1)},${Y(q[1]).toFixed(1)}`).join('L');
    root.append(svg('path', { class: 'line ' + (s.cls || ''), d, fill: 'none', stroke: s.color,
                              'stroke-width': 1.6, 'stroke-dasharray': s.dash ? '5 3' : null,
                              'data-points': p.length }));
    if (opts.markers) for (const q of p)
      root.append(svg('circle', { class: 'marker ' + (s.cls || ''), cx: X(q[0]).toFixed(1), cy: Y(q[1]).toFixed(1), r: 2.5, fill: s.color }));
  }
  return box;
}

/* ---------------------------------------------------------------------------
 * One run: history from the metrics route, then live over the event stream
 * ------------------------------------------------------------------------- */

const STAGES = ['energy', 'shower'];
const COLORS = { energy: '#1f77b4', shower: '#e1701a' };
const CHARTS = [
  { id: 'loss', title: 'training loss', band: true },
  { id: 'grad_norm', title: 'gradient norm', band: true, log: true },
  { id: 'lr', title: 'learning rate' },
  { id: 'val_loss', title: 'validation loss (fp32)', markers: true },
];

/* {name: {stage: [[step, mean, min, max], ...]}} from GET .../metrics */
async function loadHistory(id, signal) {
  const m = await api('GET', `/v1/runs/${id}/metrics?max_points=400`, undefined, signal);
  const h = {};
  for (const s of m.series || []) {
    (h[s.name] = h[s.name] || {})[s.stage] = s.points.slice();
  }
  return h;
}

function runSummary(run) {
  const best = (s) => run.best && run.best[s] ? `${fmt(run.best[s].val_loss, 6)} (step ${run.best[s].step})` : '–';
  return el('dl', { class: 'kv', id: 'run-summary' },
    el('dt', {}, 'status'), el('dd', {}, statusBadge(run.status), run.error ? el('span', { class: 'error' }, ' ' + run.error) : null),
    el('dt', {}, 'device / precision'), el('dd', {}, `${run.device || '–'} / ${run.precision || ''}`),
    el('dt', {}, 'progress'), el('dd', {}, progressCell(run.progress), run.progress && run.progress.stage ? ` stage ${run.progress.stage}, step ${run.progress.step}` : ''),
    el('dt', {}, 'best val energy'), el('dd', { class: 'num' }, best('energy')),
    el('dt', {}, 'best val shower'), el('dd', { class: 'num' }, best('shower')),
    el('dt', {}, 'attempts'), el('dd', {}, run.attempts),
    el('dt', {}, 'created / finished'), el('dd', {}, `${run.created_at || ''} / ${run.finished_at || '–'}`));
}

async function viewRun(main, id, compareId, signal) {
  crumbs([['runs', '#/runs'], [`run ${id}`, null]]);
  let run = await api('GET', `/v1/runs/${id}`, undefined, signal);
  const summary = el('div', { class: 'grow' });
  const actions = el('div');
  const head = el('div', { class: 'card' },
    el('div', { class: 'row' },
      el('h1', { class: 'grow', id: 'run-title' }, `Run ${id}${run.name ? ' — ' + run.name : ''}`),
      el('a', { href: `#/runs/${id}/showers` }, 'showers'), el('a', { href: `#/runs/${id}/evaluations` }, 'evaluations')),
    el('div', { class: 'row' }, summary, actions));
  const compareSel = el('select', { id: 'compare', onchange: (ev) => {
    location.hash = `#/runs/${id}` + (ev.target.value ? '?compare=' + ev.target.value : '');
  } }, el('option', { value: '' }, 'none'));
  const charts = el('div', { class: 'charts', id: 'charts' });
  const live = el('span', { id: 'live', class: 'muted' });
  main.append(head, el('div', { class: 'card' },
    el('div', { class: 'row' }, el('h2', { class: 'grow' }, 'Curves'), live, el('label', {}, 'overlay run ', compareSel)),
    el('div', { class: 'legend' },
      el('span', {}, el('i', { class: 'swatch sw-energy' }), 'stage 1 (energy)'),
      el('span', {}, el('i', { class: 'swatch sw-shower' }), 'stage 2 (shower)'),
      compareId ? el('span', {}, el('i', { class: 'swatch sw-dash' }), `run ${compareId} (dashed)`) : null,
      el('span', { class: 'muted' }, 'x: step within the stage; bands: min-max of the points averaged into each')),
    charts));
  const showHead = () => {
    summary.textContent = ''; summary.append(runSummary(run));
    actions.textContent = ''; actions.append(runActions(run, async () => { run = await api('GET', `/v1/runs/${id}`); showHead(); }));
  };
  showHead();
  api('GET', '/v1/runs?limit=100', undefined, signal).then((p) => {
    for (const r of p.items) if (r.id !== id)
      compareSel.append(el('option', { value: r.id, selected: r.id === compareId }, `${r.id} ${r.name || ''} (${r.status})`));
  }).catch(() => {});

  const hist = await loadHistory(id, signal);
  const other = compareId ? await loadHistory(compareId, signal).catch(() => ({})) : {};
  let pending = false;
  const draw = () => {
    pending = false;
    charts.textContent = '';
    for (const c of CHARTS) {
      const series = [];
      for (const st of STAGES) {
        if (hist[c.id] && hist[c.id][st]) series.push({ label: st, cls: 'stage-' + st, color: COLORS[st], points: hist[c.id][st] });
        if (other[c.id] && other[c.id][st]) series.push({ label: `run ${compareId} ${st}`, cls: 'compare stage-' + st, color: COLORS[st], dash: true, points: other[c.id][st] });
      }
      charts.append(lineChart(c.title, series, c));
    }
    charts.setAttribute('data-drawn', String(Date.now()));
  };
  const schedule = () => { if (!pending) { pending = true; requestAnimationFrame(draw); } };
  draw();

  const finishedNow = async () => {
    run = await api('GET', `/v1/runs/${id}`, undefined, signal);
    showHead();
    if (!FINAL.includes(run.status)) return false;
    const ev = await api('GET', `/v1/runs/${id}/evaluations`, undefined, signal);
    return !(ev.items || []).some((e) => e.status === 'queued' || e.status === 'running');
  };
  if (FINAL.includes(run.status)) { live.textContent = 'finished'; return; }
  /* Live: append what the history does not hold yet (the stream replays
   * from the start once; later reconnects resume with Last-Event-ID). */
  const push = (name, stage, step, v) => {
    const s = ((hist[name] = hist[name] || {})[stage] = (hist[name][stage] || []));
    if (s.length && s[s.length - 1][0] >= step) return;
    s.push([step, v, v, v]);
    schedule();
  };
  live.textContent = 'live';
  /* The summary again after status and checkpoint events, at most once a
   * second (a replayed stream holds many of them at once). */
  let headBusy = false, headAgain = false;
  const refreshHead = async () => {
    if (headBusy) { headAgain = true; return; }
    headBusy = true;
    try {
      do {
        headAgain = false;
        run = await api('GET', `/v1/runs/${id}`, undefined, signal);
        showHead();
        await sleep(1000, signal);
      } while (headAgain && !signal.aborted);
    } catch (e) { /* the next event tries again */ }
    headBusy = false;
  };
  streamEvents(`/v1/runs/${id}/events`, null, (e) => {
    const d = e.data || {};
    if (e.event === 'metric') {
      push('loss', d.stage, d.step, d.loss);
      push('grad_norm', d.stage, d.step, d.grad_norm);
      push('lr', d.stage, d.step, d.lr);
      live.textContent = `live: ${d.stage} step ${d.step} (event ${e.id})`;
    } else if (e.event === 'val_loss') {
      push('val_loss', d.stage, d.step, d.val_loss);
    } else if (e.event === 'status' || e.event === 'checkpoint') {
      refreshHead();
    }
  }, finishedNow, signal).then(() => { if (!signal.aborted) live.textContent = 'finished'; });
}

/* ---------------------------------------------------------------------------
 * Colour scale and shower pictures (canvas)
 * ------------------------------------------------------------------------- */

/* viridis-like, 9 stops */
const CMAP = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
              [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
function cmap(t) {
  t = Math.max(0, Math.min(1, t)) * (CMAP.length - 1);
  const i = Math.min(CMAP.length - 2, Math.floor(t)), f = t - i;
  const c = CMAP[i].map((v, k) => Math.round(v + f * (CMAP[i + 1][k] - v)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/* Draws one layer group as polar wedges (angle x radius), log colour:
 * e is the group's 16 x 9 voxel energies (alpha-major), [lo, hi] in log10. */
function drawWedges(canvas, e, lo, hi) {
  const ctx = canvas.getContext('2d');
  const S = canvas.width, c = S / 2, rmax = GEOMETRY.rEdges[GEOMETRY.r];
  const k = (c - 4) / rmax;
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, S, S);
  let drawn = 0;
  for (let a = 0; a < GEOMETRY.alpha; a++) {
    const a0 = -Math.PI + a * 2 * Math.PI / GEOMETRY.alpha, a1 = a0 + 2 * Math.PI / GEOMETRY.alpha;
    for (let r = 0; r < GEOMETRY.r; r++) {
      const v = e[a * GEOMETRY.r + r];
      ctx.beginPath();
      ctx.arc(c, c, GEOMETRY.rEdges[r + 1] * k, -a0, -a1, true);
      ctx.arc(c, c, GEOMETRY.rEdges[r] * k, -a1, -a0, false);
      ctx.closePath();
      ctx.fillStyle = v > 0 ? cmap((Math.log10(v) - lo) / (hi - lo)) : '#f2f2f2';
      ctx.fill();
      ctx.strokeStyle = 'rgba(255,255,255,0.35)';
      ctx.lineWidth = 0.5;
      ctx.stroke();
      if (v > 0) drawn++;
    }
  }
  canvas.setAttribute('data-nonzero', String(drawn));
}

function colorbar(lo, hi, unit) {
  const c = el('canvas', { width: 200, height: 12 });
  const ctx = c.getContext('2d');
  for (let x = 0; x < 200; x++) { ctx.fillStyle = cmap(x / 199); ctx.fillRect(x, 0, 1, 12); }
  return el('div', { class: 'colorbar' }, el('span', {}, fmt(Math.pow(10, lo), 2)), c,
            el('span', {}, fmt(Math.pow(10, hi), 2) + ' ' + unit), el('span', { class: 'muted' }, '(log scale; grey: empty)'));
}

/* Layer groups of one shower (or the mean): [{first, last, e: 144 values}] */
function layerGroups(vox) {
  const per = GEOMETRY.alpha * GEOMETRY.r, out = [];
  for (let l0 = 0; l0 < GEOMETRY.layers; l0 += GROUP_LAYERS) {
    const l1 = Math.min(GEOMETRY.layers, l0 + GROUP_LAYERS) - 1;
    const e = new Float64Array(per);
    for (let l = l0; l <= l1; l++) for (let i = 0; i < per; i++) e[i] += vox[l * per + i];
    out.push({ first: l0, last: l1, e });
  }
  return out;
}

function groupPictures(id, vox) {
  const groups = layerGroups(vox);
  const vals = groups.flatMap((g) => Array.from(g.e)).filter((v) => v > 0);
  const hi = vals.length ? Math.log10(Math.max(...vals)) : 0;
  const lo = hi - 4;                                      /* four decades */
  const grid = el('div', { class: 'layers', id });
  for (const g of groups) {
    const cv = el('canvas', { width: 150, height: 150, class: 'wedges', 'data-layers': `${g.first}-${g.last}` });
    drawWedges(cv, g.e, lo, hi);
    grid.append(el('figure', {}, cv, el('figcaption', {}, `layers ${g.first}–${g.last}`)));
  }
  return el('div', {}, colorbar(lo, hi, 'MeV'), grid);
}

/* A histogram in SVG: step lines per series over shared edges. */
function histChart(series, edges, opts) {
  const W = opts.w || 300, H = opts.h || 160, L = opts.small ? 4 : 44, R = 6, T = opts.title ? 14 : 4, B = opts.small ? 4 : 22;
  const root = svg('svg', { width: opts.fluid ? null : W, height: opts.fluid ? null : H, viewBox: `0 0 ${W} ${H}`,
                            class: 'hist' + (opts.fluid ? ' plot' : ''), 'data-feature': opts.feature || '' });
  const n = edges.length - 1;
  const dens = series.map((s) => {
    const tot = s.counts.reduce((a, b) => a + b, 0) || 1;
    return s.counts.map((c) => c / tot);
  });
  const ymax = Math.max(1e-12, ...dens.flat());
  /* Geometric edges (energies: E_tot, E_layer) on a log axis. */
  const ratio = (i) => edges[i + 1] / edges[i];
  const logx = n > 2 && edges[0] > 0 && ratio(0) > 1.0001 && Math.abs(ratio(0) / ratio(n - 1) - 1) < 1e-3;
  const tx = logx ? Math.log10 : (x) => x;
  const x0 = tx(edges[0]), x1 = tx(edges[n]);
  const X = (x) => L + (tx(x) - x0) / ((x1 - x0) || 1) * (W - L - R);
  root.setAttribute('data-logx', String(logx));
  const Y = (y) => T + (1 - y / ymax) * (H - T - B);
  if (!opts.small) {
    root.append(svg('path', { class: 'axis', d: `M${L},${T}V${H - B}H${W - R}` }));
    root.append(svg('text', { x: L, y: H - 6, 'text-anchor': 'start' }, fmt(edges[0], 3)));
    root.append(svg('text', { x: W - R, y: H - 6, 'text-anchor': 'end' }, fmt(edges[n], 3)));
    const label = (opts.xlabel || '') + (logx ? ' (log scale)' : '');
    if (label) root.append(svg('text', { x: (L + W) / 2, y: H - 6, 'text-anchor': 'middle' }, label));
    root.append(svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }, fmt(ymax, 2)));
  } else {
    root.append(svg('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
  }
  series.forEach((s, k) => {
    let d = `M${X(edges[0]).toFixed(1)},${Y(0).toFixed(1)}`;
    for (let i = 0; i < n; i++)
      d += `V${Y(dens[k][i]).toFixed(1)}H${X(edges[i + 1]).toFixed(1)}`;
    d += `V${Y(0).toFixed(1)}`;
    root.append(svg('path', { class: 'hist-' + s.cls, d, stroke: s.color, 'stroke-width': s.fill ? 1 : 1.4,
                              fill: s.fill ? s.color : 'none', 'fill-opacity': s.fill ? 0.25 : null,
                              'stroke-dasharray': s.dash ? '3 2' : null }));
  });
  if (opts.title) root.append(svg('text', { x: L + 2, y: 10, 'text-anchor': 'start', class: 'title' }, opts.title));
  if (opts.note) root.append(svg('text', { x: W - R, y: 10, 'text-anchor': 'end', class: 'note' }, opts.note));
  return root;
}

/* ---------------------------------------------------------------------------
 * Shower pictures
 * ------------------------------------------------------------------------- */

async function viewShowers(main, id, signal) {
  crumbs([['runs', '#/runs'], [`run ${id}`, `#/runs/${id}`], ['showers', null]]);
  const run = await api('GET', `/v1/runs/${id}`, undefined, signal);
  main.append(el('h1', {}, `Showers of run ${id}${run.name ? ' — ' + run.name : ''}`));
  const geom = run.config && run.config.dataset && run.config.dataset.geometry;
  if (run.status !== 'succeeded') {
    main.append(el('p', { class: 'muted', id: 'showers-unavailable' }, `The run is ${run.status}: showers come from a run that succeeded.`));
    return;
  }
  if (geom && geom !== 'dataset_2') {
    main.append(el('p', { class: 'muted', id: 'showers-unavailable' }, `The pictures are drawn for dataset_2 (45 x 16 x 9); this run is ${geom}.`));
    return;
  }
  const evs = await api('GET', `/v1/runs/${id}/evaluations`, undefined, signal);
  const done = (evs.items || []).filter((e) => e.status === 'succeeded');
  const energy = el('input', { id: 'energy', type: 'number', min: 100, step: 'any', value: 50000 });
  const count = el('input', { id: 'count', type: 'number', min: 1, max: 1000, value: 300 });
  const seed = el('input', { id: 'seed', type: 'number', min: 0, value: 1 });
  const refSel = el('select', { id: 'reference' }, el('option', { value: '' }, 'none'),
    done.map((e, i) => el('option', { value: e.id, selected: i === 0 }, `evaluation ${e.id} (dataset ${e.request.dataset_id}, n ${e.request.n})`)));
  const status = el('span', { id: 'sample-status', class: 'muted' });
  const out = el('div', { id: 'showers-out' });
  const form = el('form', { class: 'card', id: 'sample-form' },
    el('div', { class: 'row' },
      el('label', {}, 'incident energy (MeV) ', energy), el('label', {}, 'showers ', count),
      el('label', {}, 'seed ', seed), el('label', {}, 'reference ', refSel),
      el('button', { type: 'submit', class: 'primary', id: 'sample-go' }, 'Generate'), status),
    el('p', { class: 'muted' }, 'The showers come as JSON in requests of at most ', JSON_CHUNK,
      ' (fewer if the server says so), consecutive rows of one seed. The API has no route to read a reference dataset\'s showers: ',
      'the reference lines come from the chosen evaluation\'s stored histograms (the reference\'s own ',
      'incident energies, not this energy), and the pictures show generated showers only.'));
  main.append(form, out);
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const E = parseFloat(energy.value), N = Math.max(1, Math.min(1000, parseInt(count.value, 10) || 1));
    const S = Math.max(0, parseInt(seed.value, 10) || 0);
    out.textContent = '';
    $('#sample-go').disabled = true;
    try {
      const showers = [], energies = [];
      let chunk = JSON_CHUNK;
      while (showers.length < N) {
        const n = Math.min(chunk, N - showers.length);
        status.textContent = `generating ${showers.length}/${N}…`;
        try {
          /* row0: consecutive requests give the showers one request of N would */
          const r = await api('POST', `/v1/runs/${id}/samples`,
                              { energies: new Array(n).fill(E), seed: S, row0: showers.length }, signal);
          showers.push(...r.showers);
          energies.push(...r.energies);
        } catch (e) {
          if (e.code === 'too_many_showers' && e.limit > 0 && e.limit < chunk) { chunk = e.limit; continue; }
          throw e;
        }
      }
      status.textContent = `${showers.length} showers at ${fmt(E, 6)} MeV`;
      const ref = refSel.value ? await api('GET', `/v1/runs/${id}/evaluations/${refSel.value}`, undefined, signal) : null;
      drawShowers(out, showers, energies, ref && ref.result, E);
    } catch (e) {
      if (!signal.aborted) status.textContent = 'Error: ' + e.message;
    } finally {
      $('#sample-go').disabled = false;
    }
  };
  if (parseHash().query.get('auto') !== '0') form.requestSubmit();
}

/* The reference's mean energy fraction per layer, from an evaluation's
 * E_layer_L histograms (bin centres; values outside the bins count as 0). */
function profileFromHist(res, key) {
  const h = res && res.histograms;
  if (!h) return null;
  const n = key === 'a' ? res.n_a : res.n_b;
  const mean = [];
  for (let l = 0; l < GEOMETRY.layers; l++) {
    const hl = h['E_layer_' + l];
    if (!hl || !hl[key]) return null;
    let s = 0;
    for (let i = 0; i < hl[key].length; i++) {
      const lo = hl.edges[i], hi = hl.edges[i + 1];
      s += hl[key][i] * (lo > 0 ? Math.sqrt(lo * hi) : (lo + hi) / 2);
    }
    mean.push(s / (n || 1));
  }
  const tot = mean.reduce((a, b) => a + b, 0) || 1;
  return mean.map((v) => v / tot);
}

function profileChart(lines) {
  const W = 440, H = 240, L = 56, R = 18, T = 8, B = 26;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'plot', id: 'profile' });
  const vals = lines.flatMap((l) => l.y).filter((v) => v > 0);
  if (!vals.length) {
    root.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no energy deposited'));
    return root;
  }
  const hi = Math.log10(Math.max(...vals)) + 0.1, lo = Math.max(hi - 6, Math.log10(Math.min(...vals)) - 0.1);
  const X = (l) => L + (l + 0.5) / GEOMETRY.layers * (W - L - R);
  const Y = (v) => T + (1 - (Math.log10(Math.max(v, Math.pow(10, lo))) - lo) / (hi - lo)) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = lo + (hi - lo) * i / 4, yy = T + (1 - i / 4) * (H - T - B);
    root.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: yy, y2: yy }));
    root.append(svg('text', { x: L - 4, y: yy + 3, 'text-anchor': 'end' }, fmt(Math.pow(10, v), 2)));
  }
  for (let l = 0; l < GEOMETRY.layers; l += 5) root.append(svg('text', { x: X(l), y: H - B + 14, 'text-anchor': 'middle' }, l));
  root.append(svg('path', { class: 'axis', d: `M${L},${T}V${H - B}H${W - R}` }));
  root.append(svg('text', { x: W - R, y: H - 2, 'text-anchor': 'end' }, 'layer'));
  for (const ln of lines) {
    const d = 'M' + ln.y.map((v, l) => `${X(l).toFixed(1)},${Y(v).toFixed(1)}`).join('L');
    root.append(svg('path', { class: 'profile-' + ln.cls, d, fill: 'none', stroke: ln.color, 'stroke-width': 1.6,
                              'stroke-dasharray': ln.dash ? '4 3' : null }));
  }
  return root;
}

function drawShowers(out, showers, energies, ref, E) {
  const V = GEOMETRY.layers * GEOMETRY.alpha * GEOMETRY.r;
  if (!showers.length || showers[0].length !== V) {
    out.append(el('p', { class: 'error' }, `expected ${V} voxels a shower, got ${showers[0] ? showers[0].length : 0}`));
    return;
  }
  const N = showers.length, mean = new Float64Array(V);
  for (const s of showers) for (let i = 0; i < V; i++) mean[i] += s[i] / N;
  /* mean shower */
  out.append(el('div', { class: 'card' }, el('h2', {}, `Mean of ${N} showers at ${fmt(E, 6)} MeV (energy per voxel, summed over ${GROUP_LAYERS} layers)`),
    groupPictures('mean-shower', mean)));
  /* one shower */
  const pick = el('input', { type: 'number', min: 0, max: N - 1, value: 0, id: 'shower-index' });
  const single = el('div', { id: 'single-box' });
  const showOne = () => {
    const k = Math.max(0, Math.min(N - 1, parseInt(pick.value, 10) || 0));
    const tot = showers[k].reduce((a, b) => a + b, 0);
    single.textContent = '';
    single.append(el('p', { class: 'muted' }, `shower ${k}: E_tot ${fmt(tot, 5)} MeV, E_tot/E_inc ${fmt(tot / energies[k], 4)}, `,
      `${showers[k].filter((v) => v > 0).length} voxels hit`), groupPictures('single-shower', showers[k]));
  };
  pick.oninput = showOne;
  out.append(el('div', { class: 'card' }, el('h2', {}, 'One shower ', el('label', {}, '# ', pick)), single));
  showOne();
  /* profile and E_tot/E_inc */
  const per = GEOMETRY.alpha * GEOMETRY.r;
  const prof = new Array(GEOMETRY.layers).fill(0);
  for (let l = 0; l < GEOMETRY.layers; l++) for (let i = 0; i < per; i++) prof[l] += mean[l * per + i];
  const tot = prof.reduce((a, b) => a + b, 0) || 1;
  const lines = [{ cls: 'gen', color: '#e1701a', y: prof.map((v) => v / tot) }];
  const refProf = profileFromHist(ref, 'b'), evalGen = profileFromHist(ref, 'a');
  if (refProf) lines.push({ cls: 'ref', color: '#4a5a6a', y: refProf });
  if (evalGen) lines.push({ cls: 'evalgen', color: '#e1701a', dash: true, y: evalGen });
  const ratio = showers.map((s, k) => s.reduce((a, b) => a + b, 0) / energies[k]);
  const hr = ref && ref.histograms && ref.histograms['Etot/Einc'];
  let edges;
  if (hr) edges = hr.edges;
  else {
    const lo = Math.min(...ratio), hi = Math.max(...ratio);
    edges = Array.from({ length: 41 }, (_, i) => lo + (hi - lo || 1) * i / 40);
  }
  const counts = new Array(edges.length - 1).fill(0);
  for (const r of ratio) {
    for (let i = 0; i < counts.length; i++) if (r >= edges[i] && (r < edges[i + 1] || (i === counts.length - 1 && r <= edges[i + 1]))) { counts[i]++; break; }
  }
  const hs = [];
  if (hr) hs.push({ cls: 'ref', color: '#4a5a6a', fill: true, counts: hr.b });
  hs.push({ cls: 'gen', color: '#e1701a', counts });
  if (hr) hs.push({ cls: 'evalgen', color: '#e1701a', dash: true, counts: hr.a });
  const legend = el('div', { class: 'legend' },
    el('span', {}, el('i', { class: 'swatch sw-gen' }), `this sample (${fmt(E, 6)} MeV)`),
    ref ? el('span', {}, el('i', { class: 'swatch sw-ref' }), `reference: ${ref.b}`) : el('span', { class: 'muted' }, 'no reference: pick an evaluation'),
    ref ? el('span', {}, el('i', { class: 'swatch sw-dash' }), `${ref.a} at the reference's energies (the evaluation)`) : null);
  out.append(el('div', { class: 'card' }, el('h2', {}, 'Longitudinal profile and E_tot / E_inc'), legend,
    el('div', { class: 'row' },
      el('div', { class: 'chart' }, el('h3', {}, 'energy fraction per layer (mean)'), profileChart(lines)),
      el('div', { class: 'chart' }, el('h3', {}, 'E_tot / E_inc'),
        histChart(hs, edges, { w: 440, h: 240, fluid: true, feature: 'Etot/Einc', xlabel: 'E_tot / E_inc', id: 'etot-hist' })))));
  out.setAttribute('data-showers', String(N));
}

/* ---------------------------------------------------------------------------
 * Evaluations
 * ------------------------------------------------------------------------- */

const GROUP_ORDER = ['Etot/Einc', 'Etot', 'E_layer', 'EC_eta', 'EC_phi', 'EC_r', 'width_eta', 'width_phi', 'width_r', 'sparsity'];

function featureGroup(name) {
  const m = /^(.*)_(\d+)$/.exec(name);
  return m ? m[1] : name;
}

async function viewEvaluations(main, id, eid, signal) {
  crumbs([['runs', '#/runs'], [`run ${id}`, `#/runs/${id}`], ['evaluations', eid ? `#/runs/${id}/evaluations` : null]].concat(eid ? [[`evaluation ${eid}`, null]] : []));
  const run = await api('GET', `/v1/runs/${id}`, undefined, signal);
  main.append(el('h1', {}, `Evaluations of run ${id}${run.name ? ' — ' + run.name : ''}`));
  const tbody = el('tbody');
  const listCard = el('div', { class: 'card' }, el('table', { id: 'evaluations-table' },
    el('thead', {}, el('tr', {}, ['id', 'status', 'phase', 'progress', 'dataset', 'ref2', 'n', 'seed', 'created', ''].map((h) => el('th', {}, h)))), tbody));
  const detail = el('div', { id: 'evaluation-detail' });
  main.append(listCard);
  if (run.status === 'succeeded') main.append(await queueForm(id, run, signal));
  else main.append(el('p', { class: 'muted' }, `The run is ${run.status}: only a run that succeeded can be evaluated.`));
  main.append(detail);

  let items = [], shown = 0;
  const render = () => {
    tbody.textContent = '';
    for (const e of items) {
      const bar = el('span', { class: 'bar' }, el('span'));
      bar.firstChild.style.width = (100 * (e.progress || 0)).toFixed(1) + '%';
      tbody.append(el('tr', { 'data-evaluation': e.id, 'data-status': e.status },
        el('td', { class: 'num' }, el('a', { href: `#/runs/${id}/evaluations/${e.id}` }, e.id)),
        el('td', {}, statusBadge(e.status), e.error ? el('span', { class: 'error' }, ' ' + e.error) : null),
        el('td', {}, e.phase || ''),
        el('td', {}, bar, `${(100 * (e.progress || 0)).toFixed(0)}%`),
        el('td', {}, e.request.dataset_id), el('td', {}, e.request.ref2_dataset_id || '–'),
        el('td', { class: 'num' }, e.request.n), el('td', { class: 'num' }, e.request.seed),
        el('td', { class: 'muted' }, e.created_at || ''),
        el('td', {}, e.status === 'succeeded' ? el('a', { href: `#/runs/${id}/evaluations/${e.id}` }, 'results') : '')));
    }
    if (!items.length) tbody.append(el('tr', {}, el('td', { colspan: 10, class: 'muted' }, 'No evaluation yet.')));
  };
  const load = async () => {
    const r = await api('GET', `/v1/runs/${id}/evaluations`, undefined, signal);
    items = r.items || [];
    render();
    const want = eid || (items.find((e) => e.status === 'succeeded') || {}).id;
    const w = items.find((e) => e.id === want);
    if (w && w.status === 'succeeded' && shown !== want) {
      shown = want;
      const full = await api('GET', `/v1/runs/${id}/evaluations/${want}`, undefined, signal);
      detail.textContent = '';
      drawEvaluation(detail, full);
    } else if (eid && w && w.status !== 'succeeded') {
      detail.textContent = '';
      detail.append(el('p', { class: 'muted' }, `Evaluation ${eid} is ${w.status}${w.phase ? ' (' + w.phase + ')' : ''}.`));
    }
  };
  viewEvaluations.reload = load;
  await load();
  /* Progress: poll while one is queued or running. */
  (async () => {
    while (!signal.aborted) {
      await sleep(items.some((e) => e.status === 'queued' || e.status === 'running') ? 1000 : 4000, signal);
      if (!signal.aborted) await load().catch(() => {});
    }
  })();
}

async function queueForm(id, run, signal) {
  const geom = run.config && run.config.dataset && run.config.dataset.geometry;
  const ds = await api('GET', '/v1/datasets', undefined, signal).catch(() => ({ items: [] }));
  const usable = (ds.items || []).filter((d) => d.status === 'ready' && (!geom || d.geometry === geom));
  const opts = (none) => [none ? el('option', { value: '' }, 'none') : null].concat(
    usable.map((d) => el('option', { value: d.id }, `${d.id} ${d.name} (${d.n_showers} showers)`)));
  const dataset = el('select', { id: 'eval-dataset', name: 'dataset_id' }, opts(false));
  const ref2 = el('select', { id: 'eval-ref2', name: 'ref2_dataset_id' }, opts(true));
  const n = el('input', { id: 'eval-n', name: 'n', type: 'number', min: 20, value: Math.min(1000, ...usable.map((d) => d.n_showers || 1000)) });
  const seed = el('input', { id: 'eval-seed', name: 'seed', type: 'number', min: 0, value: 1 });
  const epochs = el('input', { id: 'eval-epochs', name: 'classifier.epochs', type: 'number', min: 1, placeholder: '50' });
  const hidden = el('input', { id: 'eval-hidden', name: 'classifier.hidden', type: 'number', min: 1, placeholder: '512' });
  const repeats = el('input', { id: 'eval-repeats', name: 'classifier.repeats', type: 'number', min: 1, max: 20, placeholder: '1' });
  const err = el('div', { class: 'field-error hidden', id: 'eval-error' });
  /* novalidate: the server checks the request and names the field */
  const form = el('form', { class: 'card', id: 'eval-form', novalidate: true }, el('h2', {}, 'Queue an evaluation'),
    usable.length ? null : el('p', { class: 'muted' }, `No ready dataset of geometry ${geom}.`),
    el('div', { class: 'row' }, el('label', {}, 'reference ', dataset), el('label', {}, 'second reference (floor) ', ref2),
      el('label', {}, 'n ', n), el('label', {}, 'seed ', seed),
      el('label', {}, 'classifier epochs ', epochs), el('label', {}, 'hidden ', hidden),
      el('label', { title: 'whole classifier tests averaged (seeds seed .. seed + repeats - 1)' }, 'repeats ', repeats),
      el('button', { type: 'submit', class: 'primary', id: 'eval-go', disabled: !usable.length }, 'Queue')), err);
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    err.classList.add('hidden');
    const body = { dataset_id: parseInt(dataset.value, 10), n: parseInt(n.value, 10), seed: parseInt(seed.value, 10) || 0 };
    if (ref2.value) body.ref2_dataset_id = parseInt(ref2.value, 10);
    const cls = {};
    if (epochs.value) cls.epochs = parseInt(epochs.value, 10);
    if (hidden.value) cls.hidden = parseInt(hidden.value, 10);
    if (repeats.value) cls.repeats = parseInt(repeats.value, 10);
    if (Object.keys(cls).length) body.classifier = cls;
    try {
      const e = await api('POST', `/v1/runs/${id}/evaluations`, body, signal);
      toast(`evaluation ${e.id} queued`);
      if (viewEvaluations.reload) await viewEvaluations.reload();
    } catch (e) {
      err.textContent = '';
      if (e.field) err.append(el('code', {}, e.field), ': ');
      err.append(e.message);
      err.setAttribute('data-field', e.field || '');
      err.classList.remove('hidden');
      const input = $(`[name="${e.field}"]`, form);
      if (input) input.focus();
    }
  };
  return form;
}

function drawEvaluation(box, ev) {
  const r = ev.result;
  box.append(el('h2', { id: 'evaluation-title' }, `Evaluation ${ev.id}: ${r.a} against ${r.b}` + (r.ref2 ? `, floor ${r.ref2}` : '')));
  const fl = r.floor || null;
  /* separation power per group */
  const groups = GROUP_ORDER.filter((g) => r.groups && r.groups[g]).concat(Object.keys(r.groups || {}).filter((g) => !GROUP_ORDER.includes(g)));
  const gt = el('table', { id: 'groups-table' }, el('thead', {}, el('tr', {},
    ['feature group', 'features', 'mean', 'median', 'max', 'max feature'].concat(fl ? ['floor mean', 'ratio'] : []).map((h) => el('th', {}, h)))));
  const gb = el('tbody');
  for (const g of groups) {
    const s = r.groups[g], f = fl && fl.groups && fl.groups[g];
    gb.append(el('tr', { 'data-group': g }, el('td', {}, g), el('td', { class: 'num' }, s.count),
      el('td', { class: 'num' }, fmt(s.mean)), el('td', { class: 'num' }, fmt(s.median)), el('td', { class: 'num' }, fmt(s.max)),
      el('td', {}, s.max_feature || ''),
      fl ? el('td', { class: 'num' }, fmt(f && f.mean)) : null,
      fl ? el('td', { class: 'num' }, f && f.mean ? fmt(s.mean / f.mean, 3) + 'x' : '–') : null));
  }
  gb.append(el('tr', {}, el('td', {}, el('b', {}, 'mean over groups')), el('td'), el('td', { class: 'num' }, el('b', {}, fmt(r.mean_over_groups))),
    el('td'), el('td'), el('td'), fl ? el('td', { class: 'num' }, fmt(fl.mean_over_groups)) : null,
    fl ? el('td', { class: 'num' }, fl.mean_over_groups ? fmt(r.mean_over_groups / fl.mean_over_groups, 3) + 'x' : '–') : null));
  gt.append(gb);
  /* AUCs, FPD, KPD */
  const at = el('table', { id: 'auc-table' }, el('thead', {}, el('tr', {},
    ['classifier', 'AUC', 'sd (repeats)', 'BCE', 'JSD (bits)', 'train / select / test'].concat(fl ? ['floor AUC'] : []).map((h) => el('th', {}, h)))));
  const ab = el('tbody');
  for (const k of ['high', 'low']) {
    const c = r.classifier && r.classifier[k];
    if (!c) continue;
    const f = fl && fl.classifier && fl.classifier[k];
    ab.append(el('tr', { 'data-classifier': k }, el('td', {}, k === 'high' ? 'high-level features' : 'voxels (low level)'),
      el('td', { class: 'num auc' }, fmt(c.auc, 4)),
      el('td', { class: 'num auc-sd' }, c.repeats > 1 ? `${fmt(c.auc_sd, 4)} (${c.repeats})` : '–'),
      el('td', { class: 'num' }, fmt(c.bce, 4)), el('td', { class: 'num' }, fmt(c.jsd_bits, 4)),
      el('td', { class: 'num' }, `${c.n_train} / ${c.n_select} / ${c.n_test}`),
      fl ? el('td', { class: 'num' }, fmt(f && f.auc, 4)) : null));
  }
  if (!ab.childNodes.length) ab.append(el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'no classifier asked')));
  at.append(ab);
  const dist = el('dl', { class: 'kv', id: 'fpd-kpd' },
    el('dt', {}, 'FPD x 1e3'), el('dd', { class: 'num' }, r.fpd_x1e3 === null || r.fpd_x1e3 === undefined ? '–' : `${fmt(r.fpd_x1e3)} ± ${fmt(r.fpd_err_x1e3, 2)}`),
    el('dt', {}, 'KPD x 1e3'), el('dd', { class: 'num' }, r.kpd_x1e3 === null || r.kpd_x1e3 === undefined ? '–' : `${fmt(r.kpd_x1e3)} ± ${fmt(r.kpd_err_x1e3, 2)}`),
    fl ? el('dt', {}, 'floor FPD / KPD') : null, fl ? el('dd', { class: 'num' }, `${fmt(fl.fpd_x1e3)} / ${fmt(fl.kpd_x1e3)}`) : null,
    el('dt', {}, 'showers'), el('dd', {}, `${r.n_a} generated, ${r.n_b} reference` + (r.n_ref2 ? `, ${r.n_ref2} floor` : '')));
  box.append(el('div', { class: 'row' },
    el('div', { class: 'card grow' }, el('h3', {}, 'Separation power per feature group (0 same, 1 disjoint)'), gt),
    el('div', { class: 'card' }, el('h3', {}, 'Classifier test (AUC 0.5: indistinguishable)'), at, el('h3', {}, 'Distances'), dist)));
  /* every feature's histogram, by group */
  const hists = r.histograms || {};
  const sp = r.separation_power || {};
  const legend = el('div', { class: 'legend' },
    el('span', {}, el('i', { class: 'swatch sw-ref' }), 'reference (filled)'),
    el('span', {}, el('i', { class: 'swatch sw-gen' }), 'generated'),
    r.ref2 ? el('span', {}, el('i', { class: 'swatch sw-dash' }), 'second reference') : null,
    el('span', { class: 'muted' }, 'S: separation power of the feature'));
  const card = el('div', { class: 'card', id: 'histograms' }, el('h2', {}, 'Histograms, generated over reference'), legend);
  const byGroup = {};
  for (const name of Object.keys(hists)) (byGroup[featureGroup(name)] = byGroup[featureGroup(name)] || []).push(name);
  const order = GROUP_ORDER.filter((g) => byGroup[g]).concat(Object.keys(byGroup).filter((g) => !GROUP_ORDER.includes(g)));
  for (const g of order) {
    const names = byGroup[g].sort((a, b) => (parseInt(a.split('_').pop(), 10) || 0) - (parseInt(b.split('_').pop(), 10) || 0));
    const single = names.length === 1;
    const grid = el('div', { class: 'hists' + (single ? ' big' : ''), 'data-group': g });
    for (const name of names) {
      const h = hists[name];
      const series = [{ cls: 'ref', color: '#4a5a6a', fill: true, counts: h.b }, { cls: 'gen', color: '#e1701a', counts: h.a }];
      if (h.ref2) series.push({ cls: 'ref2', color: '#4a5a6a', dash: true, counts: h.ref2 });
      const s = sp[name];
      grid.append(el('figure', { 'data-feature': name }, histChart(series, h.edges, {
        w: single ? 316 : 146, h: single ? 150 : 84, small: !single, feature: name, xlabel: single ? name : '',
        title: single ? name : name.replace(g + '_', 'L'), note: 'S ' + (s === null || s === undefined ? '–' : fmt(s, 2)) })));
    }
    const gs = r.groups && r.groups[g];
    card.append(el('details', { open: true, 'data-group': g },
      el('summary', {}, g + ' ', el('span', { class: 'muted' }, `${names.length} feature${names.length > 1 ? 's' : ''}` + (gs ? `, mean S ${fmt(gs.mean, 3)}, max ${fmt(gs.max, 3)} (${gs.max_feature})` : ''))),
      grid));
  }
  box.append(card);
  box.setAttribute('data-evaluation', String(ev.id));
}

/* ---------------------------------------------------------------------------
 * Start
 * ------------------------------------------------------------------------- */

async function serverInfo() {
  try {
    const i = await api('GET', '/v1/info');
    $('#server-info').textContent = `${i.name} ${i.version} (${(i.git_commit || '').slice(0, 12)}) · ${(i.devices || []).map((d) => d.kind).join(', ')}`;
  } catch (e) { /* shown by the view */ }
}

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', () => {
  $('#forget-token').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $('#forget-token').classList.add('hidden');
    toast('token forgotten');
  });
  if (sessionStorage.getItem(TOKEN_KEY)) $('#forget-token').classList.remove('hidden');
  route().then(serverInfo);
});
