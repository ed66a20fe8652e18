// BoltQ admin dashboard. Plain JS, no dependencies, same-origin API.
// Every server-provided string reaches the DOM through textContent or
// createTextNode; nothing here uses innerHTML.
'use strict';
(() => {
  const INTERVAL = 2000;
  const HISTORY = 60; // samples kept for sparklines (2 min at 2 s)
  const KEY_STORE = 'boltq.apiKey';
  const SVGNS = 'http://www.w3.org/2000/svg';
  const COUNTERS = new Set(['messages_published', 'messages_consumed', 'messages_acked',
    'messages_nacked', 'retry_count', 'dead_letter_count', 'raft_apply_count', 'snapshot_count',
    'leader_changes', 'cache_hits', 'cache_misses', 'cache_sets', 'cache_deletes']);

  const $ = (id) => document.getElementById(id);
  let apiKey = '';
  try { apiKey = sessionStorage.getItem(KEY_STORE) || ''; } catch (_) { /* storage blocked */ }
  let paused = false;
  let authWaiting = false;

  // == DOM helpers ==
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v == null || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const kid of kids) {
      if (kid == null || kid === false) continue;
      el.append(typeof kid === 'string' || typeof kid === 'number' ? document.createTextNode(String(kid)) : kid);
    }
    return el;
  }
  const setText = (el, s) => { s = s == null ? '' : String(s); if (el.textContent !== s) el.textContent = s; };
  const show = (el, on) => { if (el.hidden === on) el.hidden = !on; };
  // Empty state: show the message instead of an empty table.
  const emptyState = (tbody, msgEl, empty) => { if (msgEl) show(msgEl, empty); show(tbody.closest('.tbl-wrap'), !empty); };
  const sectionMsg = (sec, cls, msg, soft) => {
    const el = sec.querySelector('.' + cls);
    if (!el) return;
    el.classList.toggle('soft', !!soft);
    setText(el, msg || '');
    show(el, !!msg);
  };
  const setErr = (sec, msg, soft) => sectionMsg(sec, 'err', msg, soft);
  const setNote = (sec, msg) => sectionMsg(sec, 'note', msg);

  // Keyed row reconciliation: rows (and any focused button in them) survive refreshes.
  function syncRows(tbody, items, keyOf, create, update) {
    const old = tbody._rows || new Map();
    const next = new Map();
    let prev = null;
    for (const item of items) {
      const k = keyOf(item);
      let row = old.get(k);
      if (!row) row = create(item, k);
      update(row, item, k);
      next.set(k, row);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (want !== row) tbody.insertBefore(row, want);
      prev = row;
    }
    for (const [k, row] of old) if (!next.has(k)) row.remove();
    tbody._rows = next;
  }
  // Re-render a non-interactive block only when its data changed.
  function renderIfChanged(el, data, fn) {
    const sig = JSON.stringify(data);
    if (el._sig === sig) return;
    el._sig = sig;
    fn();
  }

  // == formatting ==
  const nf = new Intl.NumberFormat();
  const nf1 = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  const fmtInt = (n) => (typeof n === 'number' && isFinite(n) ? nf.format(n) : '–');
  function fmtRate(r) {
    if (r == null || !isFinite(r)) return '–';
    const a = Math.abs(r);
    if (a >= 1e6) return nf1.format(r / 1e6) + 'M';
    if (a >= 1e4) return nf1.format(r / 1e3) + 'k';
    return a >= 100 ? nf.format(Math.round(r)) : nf1.format(r);
  }
  function fmtBytes(b) {
    if (typeof b !== 'number' || !isFinite(b)) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? nf1.format(b) : nf.format(b)) + ' ' + u[i];
  }
  function fmtDur(ms) {
    if (typeof ms !== 'number' || !isFinite(ms) || ms < 0) return '–';
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + 's';
    const m = Math.floor(s / 60), hh = Math.floor(m / 60), d = Math.floor(hh / 24);
    if (d) return d + 'd ' + (hh % 24) + 'h';
    if (hh) return hh + 'h ' + (m % 60) + 'm';
    return m + 'm ' + (s % 60) + 's';
  }
  function fmtTtl(ms) {
    if (ms == null || ms < 0) return 'none';
    return ms < 1000 ? ms + ' ms' : fmtDur(ms);
  }
  // Timestamps may be ns (spec), µs, ms or s; pick by magnitude.
  function toDate(t) {
    if (typeof t !== 'number' || !isFinite(t) || t <= 0) return null;
    const ms = t > 1e17 ? t / 1e6 : t > 1e14 ? t / 1e3 : t > 1e11 ? t : t * 1000;
    return new Date(ms);
  }
  function fmtTime(t) {
    const d = toDate(t);
    return d ? d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' }) : '–';
  }
  function fmtLatency(v, unit) {
    if (typeof v !== 'number' || !isFinite(v)) return '–';
    const us = unit === 'ns' ? v / 1e3 : unit === 'ms' ? v * 1e3 : unit === 's' ? v * 1e6 : unit === 'us' ? v : null;
    if (us == null) return nf1.format(v);
    if (us < 1000) return nf1.format(us) + ' µs';
    if (us < 1e6) return nf1.format(us / 1e3) + ' ms';
    return nf1.format(us / 1e6) + ' s';
  }
  const humanize = (k) => k.replace(/_/g, ' ').replace(/^./, (c) => c.toUpperCase());
  const oneLine = (s, n) => { s = s.replace(/\s+/g, ' '); return s.length > n ? s.slice(0, n - 1) + '…' : s; };
  const toJson = (v) => { try { return JSON.stringify(v, null, 2); } catch (_) { return String(v); } };
  const valueText = (v) => (typeof v === 'string' ? v : v === undefined ? '' : toJson(v));

  // Payloads are raw JSON, or (HTTP/WAL style) base64 of the JSON text.
  function decodePayload(p) {
    if (typeof p === 'string' && p.length >= 4 && p.length % 4 === 0 && /^[A-Za-z0-9+/]+={0,2}$/.test(p)) {
      try {
        const bin = atob(p);
        const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
        const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
        return { text: toJson(JSON.parse(text)), enc: 'base64-decoded JSON' };
      } catch (_) { /* not base64 JSON: show as is */ }
    }
    if (typeof p === 'string') return { text: p, enc: 'string' };
    return { text: toJson(p), enc: 'JSON' };
  }

  // == sparklines (hand-drawn SVG) ==
  const svgEl = (tag, attrs) => {
    const el = document.createElementNS(SVGNS, tag);
    for (const k in attrs) el.setAttribute(k, attrs[k]);
    return el;
  };
  function spark(cls) {
    const svg = svgEl('svg', { class: 'spark ' + cls, viewBox: '0 0 100 24', preserveAspectRatio: 'none', 'aria-hidden': 'true', focusable: 'false' });
    svg.append(svgEl('path', { class: 'area' }), svgEl('polyline', { class: 'line', 'vector-effect': 'non-scaling-stroke' }));
    return svg;
  }
  function drawSpark(svg, data) {
    const pts = data.filter((v) => v != null && isFinite(v));
    const line = svg.lastChild, area = svg.firstChild;
    if (pts.length < 2) { line.setAttribute('points', ''); area.setAttribute('d', ''); return; }
    const max = Math.max(...pts), min = Math.min(0, ...pts);
    const span = max - min || 1;
    const step = 100 / (HISTORY - 1);
    const x0 = 100 - (pts.length - 1) * step;
    const xy = pts.map((v, i) => [(x0 + i * step).toFixed(2), (22 - ((v - min) / span) * 20).toFixed(2)]);
    line.setAttribute('points', xy.map((p) => p.join(',')).join(' '));
    area.setAttribute('d', 'M' + xy[0][0] + ',24 L' + xy.map((p) => p.join(',')).join(' L') + ' L100,24 Z');
  }
  const push = (arr, v) => { arr.push(v); if (arr.length > HISTORY) arr.shift(); return arr; };

  // == API ==
  const ApiError = (status, message, data) => Object.assign(new Error(message), { status, data });
  async function api(path, opts) {
    const { method = 'GET', body } = opts || {};
    const headers = { Accept: 'application/json' };
    if (apiKey) headers['X-API-Key'] = apiKey;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 10000);
    let res, text;
    try {
      res = await fetch(path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        signal: ctl.signal, cache: 'no-store', credentials: 'omit',
      });
      text = await res.text();
    } catch (e) {
      throw ApiError(0, e && e.name === 'AbortError' ? 'Request timed out' : 'Server unreachable');
    } finally { clearTimeout(timer); }
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
    if (res.status === 401) {
      askKey(apiKey ? 'The server rejected this API key. Enter it again.' : 'This server requires an API key.');
      throw ApiError(401, 'API key required');
    }
    if (res.status === 404 && !(data && data.error)) throw ApiError(404, 'Not available on this server');
    if (!res.ok) {
      let msg = (data && data.error) || (text || '').trim().slice(0, 200) || ('HTTP ' + res.status);
      if (data && data.leader) msg += ' (leader: ' + data.leader + ')';
      throw ApiError(res.status, msg, data);
    }
    if (data === null && text && text.trim()) throw ApiError(res.status, 'Unexpected non-JSON response');
    return data;
  }
  const qs = (o) => Object.entries(o).filter(([, v]) => v !== '' && v != null)
    .map(([k, v]) => encodeURIComponent(k) + '=' + encodeURIComponent(v)).join('&');

  // == panels and scheduling ==
  const panels = [];
  function panel(id, fn, always) {
    const p = { sec: $(id), fn, busy: false, again: false, loaded: false, visible: true, always: !!always };
    panels.push(p);
    return p;
  }
  async function run(p) {
    if (p.busy) { p.again = true; return; }
    p.busy = true;
    try {
      await p.fn(p);
      p.loaded = true;
      setErr(p.sec, '');
    } catch (e) {
      // A route this server lacks (plain-text 404) is shown as a quiet note, not an error.
      setErr(p.sec, e.status === 401 ? 'Waiting for a valid API key.' : e.message, e.status === 404 && !e.data);
      if (p.onError) p.onError(e);
    } finally {
      p.busy = false;
      if (p.again) { p.again = false; run(p); }
    }
  }
  // Scrollable table wrappers join the tab order only when they actually scroll.
  function fixScrollers() {
    for (const w of document.querySelectorAll('.tbl-wrap')) {
      const want = w.scrollWidth > w.clientWidth + 1 ? 0 : -1;
      if (w.tabIndex !== want) { if (want === 0) w.setAttribute('tabindex', '0'); else w.removeAttribute('tabindex'); }
    }
  }
  function tick(force) {
    setTimeout(fixScrollers, 500);
    if (!force && (paused || document.hidden)) return;
    if (authWaiting) return;
    for (const p of panels) if (force || p.always || p.visible || !p.loaded) run(p);
  }

  // Two-step confirmation for destructive buttons (no alerts).
  // The button is never `disabled` while busy, so keyboard focus stays on it.
  function armable(btn, label, action) {
    const aria = btn.getAttribute('aria-label');
    const disarm = () => {
      clearTimeout(btn._t);
      btn._armed = false;
      btn.classList.remove('armed');
      btn.textContent = label;
      if (aria) btn.setAttribute('aria-label', aria);
    };
    btn.textContent = label;
    btn.addEventListener('click', async () => {
      if (btn._busy) return;
      if (!btn._armed) {
        btn._armed = true;
        btn.classList.add('armed');
        btn.textContent = 'Confirm ' + label.toLowerCase() + '?';
        if (aria) btn.setAttribute('aria-label', 'Confirm: ' + aria);
        btn._t = setTimeout(disarm, 4000);
        return;
      }
      disarm();
      btn._busy = true;
      btn.setAttribute('aria-busy', 'true');
      try { await action(); } finally { btn._busy = false; btn.removeAttribute('aria-busy'); }
    });
    btn.addEventListener('blur', () => { if (btn._armed) disarm(); });
    return btn;
  }
  async function act(p, fn, okMsg) {
    setNote(p.sec, '');
    try {
      const r = await fn();
      setErr(p.sec, '');
      setNote(p.sec, typeof okMsg === 'function' ? okMsg(r) : okMsg);
      run(p);
      return r;
    } catch (e) {
      setErr(p.sec, e.status === 401 ? 'Waiting for a valid API key.' : e.message);
      return undefined;
    }
  }

  // == header: live state, pause, API key ==
  const live = $('live'), liveText = $('live-text');
  function setLive(state, text) {
    live.dataset.state = state;
    setText(liveText, text);
  }
  $('pause').addEventListener('click', (ev) => {
    paused = !paused;
    ev.currentTarget.setAttribute('aria-pressed', String(paused));
    ev.currentTarget.textContent = paused ? 'Resume' : 'Pause';
    if (paused) setLive('paused', 'Paused'); else tick(true);
  });

  const dlg = $('auth');
  function askKey(msg) {
    authWaiting = true;
    setLive('error', 'API key required');
    setText($('auth-msg'), msg);
    if (!dlg.open) {
      $('auth-key').value = '';
      if (typeof dlg.showModal === 'function') dlg.showModal(); else dlg.setAttribute('open', '');
      $('auth-key').focus();
    }
  }
  function closeDlg() { if (typeof dlg.close === 'function') dlg.close(); else dlg.removeAttribute('open'); }
  $('auth-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const k = $('auth-key').value.trim();
    if (!k) return;
    apiKey = k;
    try { sessionStorage.setItem(KEY_STORE, k); } catch (_) { /* ignore */ }
    authWaiting = false;
    closeDlg();
    tick(true);
  });
  $('auth-forget').addEventListener('click', () => {
    apiKey = '';
    try { sessionStorage.removeItem(KEY_STORE); } catch (_) { /* ignore */ }
    $('auth-key').value = '';
    setText($('auth-msg'), 'Key forgotten. Enter a key, or cancel to continue without one.');
    $('auth-key').focus();
  });
  $('auth-cancel').addEventListener('click', () => { closeDlg(); authWaiting = false; });
  dlg.addEventListener('cancel', () => { authWaiting = false; });
  $('key-btn').addEventListener('click', () => {
    setText($('auth-msg'), apiKey ? 'A key is set for this tab. Enter a new one to replace it.' : 'Enter the server\'s API key.');
    $('auth-key').value = '';
    if (typeof dlg.showModal === 'function') dlg.showModal(); else dlg.setAttribute('open', '');
    $('auth-key').focus();
  });

  // == overview + queues ==
  const hist = { pub: [], con: [], ack: [], nack: [], ready: [], dl: [], lat: {} };
  const qHist = new Map();
  // Rates compare against the newest sample at least MIN_DT old (an extra refresh after an
  // action must not yield a bogus 0/s); sparklines grow at most once per MIN_DT.
  const MIN_DT = 1.5;
  const samples = [];
  let lastGrow = -Infinity;
  let lastOverview = null;

  // [key, label, unit, sparkline?]
  const cards = {};
  for (const [k, label, unit, sp] of [['pub', 'Published', '/s', 1], ['con', 'Consumed', '/s', 1], ['ack', 'Acked', '/s', 1],
    ['nack', 'Nacked', '/s', 1], ['ready', 'Ready', '', 1], ['pending', 'Pending'], ['delayed', 'Delayed'],
    ['dl', 'Dead letters', '', 1], ['uptime', 'Uptime'], ['memory', 'Memory'], ['storage', 'Storage'], ['conns', 'Connections']]) {
    const val = h('span', { class: 'val' }, '–'), sub = h('p', { class: 'sub' }), svg = sp ? spark(k) : null;
    const card = h('div', { class: 'card' }, h('p', { class: 'lbl' }, label), h('p', { class: 'big' }, val, h('span', { class: 'unit' }, unit)), sub, svg);
    cards[k] = { card, val, sub, svg };
    $('cards').append(card);
  }
  cards.conns.card.hidden = true;
  const card = (k, v, sub) => { setText(cards[k].val, v); setText(cards[k].sub, sub || ''); };

  const isHist = (v) => v && typeof v === 'object' && !Array.isArray(v) && ('p50' in v || 'p99' in v || 'p90' in v);
  const unitOf = (name) => { const m = /_(ns|us|ms|s|seconds)$/.exec(name); return m ? (m[1] === 'seconds' ? 's' : m[1]) : ''; };
  const rate = (cur, prev, dt) => (typeof cur === 'number' && typeof prev === 'number' && dt > 0 && cur >= prev ? (cur - prev) / dt : null);
  const sum = (o) => Object.values(o || {}).reduce((a, b) => a + (typeof b === 'number' ? b : 0), 0);

  const ovPanel = panel('overview', async () => {
    let ov;
    try { ov = await api('/overview'); } catch (e) {
      if (e.status !== 404) throw e;
      ov = { stats: await api('/stats') }; // older servers
    }
    let m = null; // /metrics JSON (counters, gauges, histograms); falls back to ov.metrics
    try { m = await api('/metrics'); } catch (e) { if (e.status === 401) throw e; }
    m = Object.assign({}, ov.metrics, m && typeof m === 'object' ? m : null);
    lastOverview = ov;
    renderWarnings(ov.warnings);
    renderOverview(ov, m);
    setLive('ok', 'Live · ' + new Date().toLocaleTimeString());
  }, true);
  ovPanel.onError = (e) => { if (e.status !== 401) setLive('error', e.status ? 'Error' : 'Offline'); };
  // Queues share the overview fetch; refreshing them refreshes the overview.
  const qPanel = { sec: $('queues'), fn: () => run(ovPanel) };

  // Startup warnings (a listener other hosts reach with no API key): a log line scrolls
  // away, this stays on every page load until the configuration is fixed.
  function renderWarnings(list) {
    const box = $('warnings');
    const items = Array.isArray(list) ? list.filter((w) => typeof w === 'string') : [];
    box.replaceChildren(...items.map((w) => { const p = document.createElement('p'); p.textContent = w; return p; }));
    box.hidden = items.length === 0;
  }

  function renderOverview(ov, m) {
    const t = performance.now() / 1000;
    const st = ov.stats || {};
    const queues = st.Queues || {};
    const perQ = m.queues && typeof m.queues === 'object' ? m.queues : {};
    let prevSample = null;
    for (let i = samples.length - 1; i >= 0; i--) if (t - samples[i].t >= MIN_DT) { prevSample = samples[i]; break; }
    const grow = t - lastGrow >= MIN_DT;
    if (grow) lastGrow = t;
    const dt = prevSample ? t - prevSample.t : 0;
    const pm = prevSample ? prevSample.m : {};
    const r = (k) => rate(m[k], pm[k], dt);

    const pub = r('messages_published'), con = r('messages_consumed'), ack = r('messages_acked'), nack = r('messages_nacked');
    if (prevSample && grow) { push(hist.pub, pub); push(hist.con, con); push(hist.ack, ack); push(hist.nack, nack); }
    card('pub', fmtRate(pub), 'total ' + fmtInt(m.messages_published));
    card('con', fmtRate(con), 'total ' + fmtInt(m.messages_consumed));
    card('ack', fmtRate(ack), 'total ' + fmtInt(m.messages_acked));
    const retry = r('retry_count');
    card('nack', fmtRate(nack), 'total ' + fmtInt(m.messages_nacked) + (retry != null ? ' · retries ' + fmtRate(retry) + '/s' : ''));

    const ready = sum(queues), dls = sum(st.DeadLetters);
    if (grow) { push(hist.ready, ready); push(hist.dl, dls); }
    card('ready', fmtInt(ready), Object.keys(queues).length + ' queues');
    card('pending', fmtInt(st.PendingCount), 'delivered, not acked');
    card('delayed', fmtInt(st.DelayedCount), 'scheduled');
    const dlr = r('dead_letter_count');
    card('dl', fmtInt(dls), dlr != null ? '+' + fmtRate(dlr) + '/s' : '');
    card('uptime', fmtDur(ov.uptime_ms), 'health: ' + (ov.health || '–'));
    const sys = ov.system || {};
    card('memory', fmtBytes(sys.memory), sys.goroutines != null ? fmtInt(sys.goroutines) + ' tasks' : '');
    const sto = ov.storage || {};
    card('storage', sto.mode || '–', sto.mode === 'disk'
      ? 'WAL ' + fmtBytes(sto.size) + (sto.compaction_threshold ? ' / ' + fmtBytes(sto.compaction_threshold) : '') : '');
    const conns = [m.connections, sys.connections, m.connections_open].find((v) => typeof v === 'number');
    cards.conns.card.hidden = conns === undefined;
    if (conns !== undefined) card('conns', fmtInt(conns), 'client sessions');
    for (const k of ['pub', 'con', 'ack', 'nack', 'ready', 'dl']) drawSpark(cards[k].svg, hist[k]);

    renderLatency(m, grow);
    renderAllMetrics(m, pm, dt);

    // Queues table
    const names = Object.keys(queues).sort();
    const havePerQ = names.some((q) => perQ[q] && typeof perQ[q] === 'object');
    $('q-table').classList.toggle('no-perq', !havePerQ);
    const prevQ = prevSample ? prevSample.q : {};
    const prevQm = prevSample ? prevSample.qm : {};
    syncRows($('q-body'), names, (q) => q, (q) => {
      const svg = spark('q');
      const btn = armable(h('button', { type: 'button', class: 'danger small', 'aria-label': 'Purge queue ' + q }), 'Purge',
        () => act(qPanel, () => api('/queues/purge', { method: 'POST', body: { queue: q } }),
          (res) => 'Purged ' + fmtInt(res && res.purged_count) + ' ready messages from ' + q + '.'));
      const row = h('tr', null, h('th', { scope: 'row', class: 'name' }, q), h('td', { class: 'num' }), h('td', { class: 'num perq' }),
        h('td', { class: 'num perq' }), h('td', { class: 'num perq' }), h('td', { class: 'num' }), h('td', { class: 'trend' }, svg), h('td', { class: 'act' }, btn));
      row._svg = svg;
      row.dataset.queue = q;
      return row;
    }, (row, q) => {
      const c = row.cells, depth = queues[q], qm = perQ[q] || {}, pq = prevQm[q] || {};
      setText(c[1], fmtInt(depth));
      c[1].dataset.value = String(depth);
      setText(c[2], fmtInt(qm.pending));
      setText(c[3], fmtRate(rate(qm.published, pq.published, dt)));
      setText(c[4], fmtRate(rate(qm.consumed, pq.consumed, dt)));
      const net = prevSample && typeof prevQ[q] === 'number' && dt > 0 ? (depth - prevQ[q]) / dt : null;
      setText(c[5], net == null ? '–' : (net > 0 ? '+' : '') + fmtRate(net));
      let hq = qHist.get(q);
      if (!hq) qHist.set(q, (hq = []));
      if (grow) push(hq, depth);
      drawSpark(row._svg, hq);
    });
    for (const q of qHist.keys()) if (!(q in queues)) qHist.delete(q);
    emptyState($('q-body'), $('q-empty'), names.length === 0);

    const topics = st.Topics || {};
    const tn = Object.keys(topics).sort();
    syncRows($('t-body'), tn, (x) => x, (x) => h('tr', null, h('th', { scope: 'row', class: 'name' }, x), h('td', { class: 'num' })),
      (row, x) => setText(row.cells[1], fmtInt(topics[x])));
    emptyState($('t-body'), $('t-empty'), tn.length === 0);

    samples.push({ t, m, q: Object.assign({}, queues), qm: perQ });
    if (samples.length > 8) samples.shift();
  }

  function renderLatency(m, grow) {
    const names = Object.keys(m).filter((k) => isHist(m[k])).sort();
    show($('latency'), names.length > 0);
    if (!names.length) return;
    const order = ['count', 'mean', 'p50', 'p90', 'p95', 'p99', 'p999', 'max'];
    const cols = order.filter((c) => names.some((n) => c in m[n]));
    const cls = (c) => (['p50', 'p99', 'max'].includes(c) ? 'num' : 'num hide-sm');
    renderIfChanged($('lat-head'), cols, () => {
      $('lat-head').replaceChildren(h('th', null, 'Metric'),
        ...cols.map((c) => h('th', { class: cls(c) }, c)), h('th', { class: 'trend' }, 'p99 trend'));
      $('lat-body')._rows = null;
      $('lat-body').replaceChildren();
    });
    syncRows($('lat-body'), names, (n) => n, (n) => {
      const svg = spark('lat');
      const row = h('tr', null, h('th', { scope: 'row' }, humanize(n.replace(/_(ns|us|ms|s|seconds)$/, ''))),
        ...cols.map((c) => h('td', { class: cls(c) })), h('td', { class: 'trend' }, svg));
      row._svg = svg;
      return row;
    }, (row, n) => {
      const v = m[n], u = unitOf(n);
      cols.forEach((c, i) => setText(row.cells[i + 1], c === 'count' ? fmtInt(v[c]) : fmtLatency(v[c], u)));
      const hl = hist.lat[n] || (hist.lat[n] = []);
      if (grow) push(hl, typeof v.p99 === 'number' ? v.p99 : null);
      drawSpark(row._svg, hl);
    });
  }

  function renderAllMetrics(m, pm, dt) {
    const rows = [];
    for (const k of Object.keys(m).sort()) {
      const v = m[k];
      if (typeof v === 'number') {
        const rr = COUNTERS.has(k) || /_total$/.test(k) ? rate(v, pm[k], dt) : null;
        rows.push([k, fmtInt(v) + (rr != null ? '  (' + fmtRate(rr) + '/s)' : '')]);
      } else if (!isHist(v)) rows.push([k, v && typeof v === 'object' ? oneLine(toJson(v), 400) : String(v)]);
    }
    syncRows($('all-metrics'), rows, (r) => r[0], (r) => h('div', null, h('dt', null, r[0]), h('dd')),
      (wrap, r) => setText(wrap.lastChild, r[1]));
  }

  // == dead letters ==
  const dlb = { queue: null, offset: 0, limit: 20, back: [], next: null, msgs: new Map(), selected: null };
  const dlPanel = panel('dead-letters', async () => {
    let list;
    try {
      const r = await api('/dead-letters');
      list = (r && r.dead_letters) || [];
    } catch (e) {
      if (e.status !== 404 || !lastOverview) throw e;
      const d = (lastOverview.stats && lastOverview.stats.DeadLetters) || {};
      list = Object.keys(d).map((k) => ({ queue: k.replace(/_dead_letter$/, ''), dead_letter: k, count: d[k] }));
    }
    list = list.filter((x) => x && typeof x.queue === 'string').sort((a, b) => (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : 0));
    syncRows($('dl-body'), list, (x) => x.queue, (x) => {
      const q = x.queue;
      const browse = h('button', { type: 'button', class: 'small', 'aria-label': 'Browse dead letters of ' + q, onclick: () => openBrowser(q) }, 'Browse');
      const rq = armable(h('button', { type: 'button', class: 'small', 'aria-label': 'Requeue all dead letters of ' + q }), 'Requeue',
        () => requeue(q));
      const pg = armable(h('button', { type: 'button', class: 'danger small', 'aria-label': 'Purge dead letters of ' + q }), 'Purge',
        () => act(dlPanel, () => api('/dead-letters/purge', { method: 'POST', body: { queue: q } }),
          (res) => 'Purged ' + fmtInt(res && res.purged_count) + ' dead letters of ' + q + '.').then(() => run(ovPanel)));
      return h('tr', { 'data-queue': q }, h('th', { scope: 'row', class: 'name' }, h('span', null, q), h('span', { class: 'muted sm' })),
        h('td', { class: 'num' }), h('td', { class: 'act' }, browse, rq, pg));
    }, (row, x) => {
      setText(row.cells[0].lastChild, x.dead_letter ? ' ' + x.dead_letter : '');
      setText(row.cells[1], fmtInt(x.count));
      row.cells[1].dataset.value = String(x.count);
    });
    emptyState($('dl-body'), $('dl-empty'), list.length === 0);
    if (dlb.queue && !list.some((x) => x.queue === dlb.queue)) { dlb.queue = null; show($('dlb'), false); }
    if (dlb.queue) await loadPage();
  });

  async function requeue(q, limit) {
    const body = { queue: q };
    if (limit) body.limit = limit;
    await act(dlPanel, () => api('/dead-letters/requeue', { method: 'POST', body }),
      (res) => 'Requeued ' + fmtInt(res && res.requeued) + ' message(s) from the dead letters of ' + q + '.');
    run(ovPanel);
  }
  function openBrowser(q) {
    if (dlb.queue !== q) {
      Object.assign(dlb, { queue: q, offset: 0, back: [], next: null, selected: null });
      dlb.msgs.clear();
      $('dlb-body')._rows = null;
      $('dlb-body').replaceChildren();
      show($('dlm'), false);
    }
    setText($('dlb-title'), 'Dead letters of ' + q);
    show($('dlb'), true);
    run(dlPanel);
    $('dlb-title').setAttribute('tabindex', '-1');
    $('dlb-title').focus();
  }
  async function loadPage() {
    const q = dlb.queue;
    const r = await api('/dead-letters?' + qs({ queue: q, offset: dlb.offset, limit: dlb.limit }));
    if (dlb.queue !== q) return;
    const msgs = (r && Array.isArray(r.messages)) ? r.messages : [];
    dlb.next = r && typeof r.next_offset === 'number' && msgs.length ? r.next_offset : null;
    setText($('dlb-range'), msgs.length ? (dlb.offset + 1) + '–' + (dlb.offset + msgs.length) : 'offset ' + dlb.offset);
    const prev = $('dlb-prev'), next = $('dlb-next'), had = document.activeElement;
    prev.disabled = dlb.offset === 0;
    next.disabled = dlb.next == null;
    if (had && had.disabled) (had === prev ? next : prev).focus(); // keep keyboard focus in the pager
    dlb.msgs.clear();
    msgs.forEach((msg, i) => dlb.msgs.set(msg && msg.id != null ? String(msg.id) : '#' + (dlb.offset + i), msg));
    syncRows($('dlb-body'), [...dlb.msgs.keys()], (k) => k, (k) => {
      const view = h('button', { type: 'button', class: 'small', 'aria-label': 'View message ' + k, onclick: () => viewMsg(k) }, 'View');
      return h('tr', null, h('td', { class: 'mono', title: k }, k.length > 12 ? k.slice(0, 12) + '…' : k),
        h('td', { class: 'hide-sm' }), h('td', { class: 'num' }), h('td', { class: 'mono preview' }), h('td', { class: 'act' }, view));
    }, (row, k) => {
      const msg = dlb.msgs.get(k) || {};
      setText(row.cells[1], fmtTime(msg.timestamp));
      setText(row.cells[2], fmtInt(msg.retry));
      setText(row.cells[3], oneLine(decodePayload(msg.payload).text, 80));
      row.classList.toggle('sel', k === dlb.selected);
    });
    emptyState($('dlb-body'), $('dlb-empty'), msgs.length === 0);
  }
  function viewMsg(k) {
    const msg = dlb.msgs.get(k);
    if (!msg) return;
    dlb.selected = k;
    for (const [key, row] of $('dlb-body')._rows) row.classList.toggle('sel', key === k);
    const meta = [['ID', k], ['Topic', msg.topic], ['Time', fmtTime(msg.timestamp)], ['Retry', fmtInt(msg.retry)]];
    for (const f of ['max_retry', 'priority', 'exchange', 'routing_key']) if (msg[f] != null && msg[f] !== '') meta.push([humanize(f), String(msg[f])]);
    $('dlm-meta').replaceChildren(...meta.map(([a, b]) => h('div', null, h('dt', null, a), h('dd', { class: 'mono' }, b == null ? '–' : String(b)))));
    const hd = msg.headers && typeof msg.headers === 'object' && Object.keys(msg.headers).length ? toJson(msg.headers) : 'none';
    setText($('dlm-headers'), hd);
    const p = decodePayload(msg.payload);
    setText($('dlm-enc'), '(' + p.enc + ')');
    setText($('dlm-payload'), p.text);
    show($('dlm'), true);
    $('dlm').focus();
  }
  $('dlb-close').addEventListener('click', () => {
    dlb.queue = null;
    show($('dlb'), false);
    const b = $('dl-body').querySelector('button');
    if (b) b.focus();
  });
  $('dlb-prev').addEventListener('click', () => {
    dlb.offset = dlb.back.length ? dlb.back.pop() : Math.max(0, dlb.offset - dlb.limit);
    run(dlPanel);
  });
  $('dlb-next').addEventListener('click', () => {
    if (dlb.next == null) return;
    dlb.back.push(dlb.offset);
    dlb.offset = dlb.next;
    run(dlPanel);
  });
  $('dlb-requeue').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const n = parseInt($('dlb-limit').value, 10);
    if (dlb.queue) requeue(dlb.queue, n > 0 ? n : undefined);
  });

  // == exchanges ==
  panel('exchanges', async () => {
    const r = await api('/exchanges');
    const list = (r && Array.isArray(r.exchanges)) ? r.exchanges : [];
    const el = $('ex-list');
    renderIfChanged(el, list, () => {
      if (!list.length) { el.replaceChildren(h('p', { class: 'empty' }, 'No exchanges declared.')); return; }
      el.replaceChildren(...list.map((x) => {
        const b = Array.isArray(x.bindings) ? x.bindings : [];
        const head = h('div', { class: 'ex-head' }, h('h3', null, String(x.name == null ? '' : x.name) || '(default)'),
          h('span', { class: 'badge' }, String(x.type || '?')), x.durable ? h('span', { class: 'badge' }, 'durable') : null,
          h('span', { class: 'muted sm' }, b.length + (b.length === 1 ? ' binding' : ' bindings')));
        if (!b.length) return h('article', { class: 'ex' }, head);
        const rows = b.map((bd) => {
          const hdr = bd.headers && typeof bd.headers === 'object' ? Object.entries(bd.headers).map(([k, v]) => k + '=' + v).join(', ') : '';
          return h('tr', null, h('th', { scope: 'row', class: 'name' }, String(bd.queue == null ? '' : bd.queue)),
            h('td', { class: 'mono' }, String(bd.binding_key == null ? '' : bd.binding_key)),
            h('td', { class: 'mono' }, hdr ? hdr + (bd.match_all ? ' (all)' : ' (any)') : ''));
        });
        return h('article', { class: 'ex' }, head, h('div', { class: 'tbl-wrap' },
          h('table', { class: 'tbl' }, h('thead', null, h('tr', null, h('th', null, 'Queue'),
            h('th', null, 'Binding key'), h('th', null, 'Headers'))), h('tbody', null, ...rows))));
      }));
    });
  });

  // == connections ==
  const connPanel = panel('connections', async () => {
    const r = await api('/connections');
    const list = (r && Array.isArray(r.connections)) ? r.connections : [];
    show($('conn-wrap'), list.length > 0);
    const n = r && typeof r.count === 'number' ? r.count : list.length;
    setText($('conn-count'), fmtInt(n) + (n === 1 ? ' open connection' : ' open connections') + (list.length < n ? ' (showing ' + fmtInt(list.length) + ')' : ''));
    const now = Date.now();
    const rows = list.map((c) => {
      const s = c.since_ms;
      // since_ms: Unix ms of connect time (large), or an age in ms (small).
      const age = typeof s === 'number' ? (s > 1e12 ? now - s : s) : null;
      const idle = typeof c.idle_ms === 'number' ? fmtDur(c.idle_ms) : '–';
      return [String(c.shard == null ? '–' : c.shard), String(c.peer == null ? '' : c.peer), fmtDur(age), idle];
    });
    renderIfChanged($('conn-body'), rows, () => {
      $('conn-body').replaceChildren(...rows.map((x) => h('tr', null, h('td', { class: 'num' }, x[0]), h('td', { class: 'mono' }, x[1]), h('td', { class: 'num' }, x[2]), h('td', { class: 'num' }, x[3]))));
    });
  });
  connPanel.onError = (e) => { if (e.status === 404) { show($('conn-wrap'), false); setText($('conn-count'), ''); } };

  // == cache ==
  const cf = { pattern: '', search: '' };
  let cacheSel = null;
  const ccards = {};
  for (const [k, label] of [['key_count', 'Keys'], ['memory_used', 'Memory'], ['ratio', 'Hit ratio'], ['hits', 'Hits'],
    ['misses', 'Misses'], ['sets', 'Sets'], ['deletes', 'Deletes'], ['expired', 'Expired']]) {
    const val = h('span', { class: 'val' }, '–');
    $('cache-cards').append(h('div', { class: 'card' }, h('p', { class: 'lbl' }, label), h('p', { class: 'big' }, val)));
    ccards[k] = val;
  }
  const cachePanel = panel('cache', async () => {
    const s = await api('/cache/stats');
    const on = !!(s && s.enabled);
    show($('cache-off'), !on);
    show($('cache-on'), on);
    if (!on) return;
    const st = s.stats || {};
    for (const k of ['key_count', 'hits', 'misses', 'sets', 'deletes', 'expired']) setText(ccards[k], fmtInt(st[k]));
    setText(ccards.memory_used, fmtBytes(st.memory_used));
    const tot = (st.hits || 0) + (st.misses || 0);
    setText(ccards.ratio, tot ? nf1.format((100 * (st.hits || 0)) / tot) + '%' : '–');
    const r = await api('/cache/entries?' + qs(cf));
    const entries = (r && Array.isArray(r.entries)) ? r.entries : [];
    const total = r && typeof r.total === 'number' ? r.total : entries.length;
    setText($('cache-total'), total === entries.length ? fmtInt(total) + (total === 1 ? ' entry' : ' entries')
      : 'Showing ' + fmtInt(entries.length) + ' of ' + fmtInt(total) + ' matching entries');
    const byKey = new Map(entries.map((e) => [String(e.key), e]));
    syncRows($('ce-body'), [...byKey.keys()], (k) => k, (k) => {
      const view = h('button', { type: 'button', class: 'small', 'aria-label': 'View key ' + k, onclick: () => viewKey(k) }, 'View');
      const del = armable(h('button', { type: 'button', class: 'danger small', 'aria-label': 'Delete key ' + k }), 'Delete',
        () => act(cachePanel, () => { if (k === cacheSel) closeKey(); return api('/cache/del', { method: 'POST', body: { key: k } }); },
          (res) => (res && res.deleted ? 'Deleted ' : 'Key was already gone: ') + k));
      return h('tr', null, h('th', { scope: 'row', class: 'name mono' }, k), h('td', { class: 'mono preview' }),
        h('td', { class: 'num hide-sm' }), h('td', { class: 'num' }), h('td', { class: 'act' }, view, del));
    }, (row, k) => {
      const e = byKey.get(k);
      setText(row.cells[1], oneLine(valueText(e.value), 60));
      setText(row.cells[2], fmtBytes(e.size));
      setText(row.cells[3], fmtTtl(e.ttl));
      row.classList.toggle('sel', k === cacheSel);
    });
    emptyState($('ce-body'), null, entries.length === 0);
  });
  async function viewKey(k) {
    cacheSel = k;
    const r = await act(cachePanel, () => api('/cache/get?' + qs({ key: k })), '');
    if (!r) return;
    setText($('cv-title'), 'Key ' + k);
    $('cv-meta').replaceChildren(
      h('div', null, h('dt', null, 'Type'), h('dd', null, r.value === null ? 'null' : Array.isArray(r.value) ? 'array' : typeof r.value)),
      h('div', null, h('dt', null, 'TTL'), h('dd', null, fmtTtl(r.ttl))),
      h('div', null, h('dt', null, 'Created'), h('dd', null, fmtTime(r.created_at))));
    setText($('cv-value'), valueText(r.value));
    show($('cv'), true);
    $('cv').focus();
  }
  function closeKey() { cacheSel = null; show($('cv'), false); }
  $('cv-close').addEventListener('click', () => {
    const b = cacheSel && $('ce-body')._rows && $('ce-body')._rows.get(cacheSel);
    closeKey();
    if (b) b.querySelector('button').focus();
  });
  $('cache-filter').addEventListener('submit', (ev) => {
    ev.preventDefault();
    cf.pattern = $('cf-pattern').value.trim();
    cf.search = $('cf-search').value.trim();
    run(cachePanel);
  });
  $('cache-set').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = $('cs-key').value;
    const raw = $('cs-value').value;
    let value;
    try { value = JSON.parse(raw); } catch (_) { value = raw; }
    const ttl = parseInt($('cs-ttl').value, 10) || 0;
    act(cachePanel, () => api('/cache/set', { method: 'POST', body: { key, value, ttl } }), 'Set ' + key + '.');
  });
  armable($('cache-flush'), 'Flush cache', () => act(cachePanel, () => { closeKey(); return api('/cache/flush', { method: 'POST', body: {} }); },
    (res) => 'Flushed ' + fmtInt(res && res.removed) + ' keys.'));

  // == cluster ==
  panel('cluster', async () => {
    const r = await api('/cluster/status');
    const on = !!(r && r.enabled);
    show($('cl-off'), !on);
    show($('cl-on'), on);
    if (!on) return;
    const c = (r.cluster && typeof r.cluster === 'object') ? r.cluster : {};
    const first = ['node_id', 'state', 'leader_id', 'leader', 'term', 'last_index', 'raft_addr'];
    const tables = ['peers', 'members', 'groups', 'slots_led'];
    const keys = first.filter((k) => k in c).concat(Object.keys(c).filter((k) => !first.includes(k) && !tables.includes(k)).sort());
    const meta = keys.map((k) => [humanize(k), typeof c[k] === 'object' && c[k] !== null ? oneLine(toJson(c[k]), 300) : String(c[k])]);
    renderIfChanged($('cl-meta'), meta, () => {
      $('cl-meta').replaceChildren(...meta.map(([a, b]) => h('div', null, h('dt', null, a),
        h('dd', { class: a === 'State' ? 'state state-' + b.toLowerCase() : 'mono' }, b))));
    });
    const peers = Array.isArray(c.peers) ? c.peers.map(String) : [];
    renderIfChanged($('cl-peers'), [peers, c.leader_id, c.node_id], () => {
      $('cl-peers').replaceChildren(...peers.map((p) => {
        const at = p.indexOf('@');
        const id = at > 0 ? p.slice(0, at) : p;
        return h('li', null, h('span', { class: 'mono' }, h('strong', null, id), at > 0 ? ' @ ' + p.slice(at + 1) : ''),
          id === c.leader_id ? h('span', { class: 'badge' }, 'leader') : null, id === c.node_id ? h('span', { class: 'badge' }, 'this node') : null);
      }));
      if (!peers.length) $('cl-peers').replaceChildren(h('li', { class: 'muted' }, 'No peers reported.'));
    });
    const led = (c.slots_led && typeof c.slots_led === 'object') ? c.slots_led : {};
    const members = Array.isArray(c.members) ? c.members : [];
    renderIfChanged($('cl-members'), [members, led], () => {
      $('cl-members').tBodies[0].replaceChildren(...members.map((m) => h('tr', null,
        h('th', { scope: 'row', class: 'name' }, String(m.node_id)), h('td', { class: 'mono' }, String(m.raft_addr)),
        h('td', { class: 'num' }, fmtInt(led[m.node_id] || 0)), h('td', { class: 'num' }, fmtInt(m.slots_voting)),
        h('td', { class: 'num' }, fmtInt(m.slots_learning)))));
    });
    const groups = Array.isArray(c.groups) ? c.groups : [];
    renderIfChanged($('cl-groups'), groups, () => {
      $('cl-groups').tBodies[0].replaceChildren(...groups.map((g) => h('tr', { class: g.leader ? null : 'warn' },
        h('td', { class: 'num' }, String(g.slot)), h('td', { class: 'mono' }, g.leader || 'no leader'),
        h('td', { class: 'num' }, fmtInt(g.term)), h('td', { class: 'num' }, fmtInt(g.commit)),
        h('td', { class: 'num' }, fmtInt(g.applied)), h('td', { class: 'num' }, fmtInt(g.lag)))));
    });
  });

  // == visibility: only refresh sections that are on screen ==
  if ('IntersectionObserver' in window) {
    const io = new IntersectionObserver((ents) => {
      for (const en of ents) {
        const p = panels.find((x) => x.sec === en.target);
        if (p) { const was = p.visible; p.visible = en.isIntersecting; if (p.visible && !was && !paused) run(p); }
      }
    }, { rootMargin: '200px 0px' });
    for (const p of panels) io.observe(p.sec);
  }
  window.addEventListener('resize', fixScrollers);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); });

  tick(true);
  setInterval(tick, INTERVAL);
})();
